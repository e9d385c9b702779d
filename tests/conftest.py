from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

FLICKR8K = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "flickr8k"


def write_image(path: Path, seed: int = 0, size: int = 32) -> Path:
    """A small random RGB JPEG/PNG at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 255, (size, size, 3), dtype=np.uint8)).save(path)
    return path


@pytest.fixture
def flickr8k_root() -> Path:
    if not (FLICKR8K / "Flickr8k.token.txt").is_file():
        pytest.skip(f"real Flickr8k not found at {FLICKR8K}")
    return FLICKR8K
