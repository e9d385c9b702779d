from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

from vsekit.lab.features.backbones import Backbone, LayerSpec, register_backbone

FLICKR8K = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "flickr8k"


def wait_for(cond: Callable[[], object], timeout: float = 20.0) -> bool:
    """Poll ``cond`` every 50 ms until it holds or ``timeout`` seconds pass: whether it
    held."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return bool(cond())


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


@pytest.fixture(scope="session")
def flickr8k_slice_photos() -> list[Path]:
    """48 photos spread over the 500 train images carved out for selection (never dev)."""
    if not (FLICKR8K / "Flickr8k.token.txt").is_file():
        pytest.skip(f"real Flickr8k not found at {FLICKR8K}")
    from vsekit.lab.data import load_dataset

    held = load_dataset(FLICKR8K).carve("train", 500, "train-val", 0).split("train-val")
    step = len(held.images) // 48
    return [Path(im.path) for im in held.images[::step][:48]]


class TinyBackbone(Backbone):
    """Two small conv layers and an fc layer: fast enough for extraction tests."""

    input_size = 32

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.ModuleDict({"c1": nn.Conv2d(3, 4, 3, 2), "c2": nn.Conv2d(4, 6, 3, 2),
                                  "fc": nn.Linear(6, 5)})  # fmt: skip
        self.layers = (LayerSpec("c1", 4), LayerSpec("c2", 6), LayerSpec("fc", 5, "fc"))
        self.baseline_layer, self.last_map_layer = "fc", "c2"

    def iter_layers(self, x: torch.Tensor) -> Iterator[torch.Tensor]:
        x = torch.relu(self.net["c1"](self.normalize(x)))
        yield x
        x = torch.relu(self.net["c2"](x))
        yield x
        yield self.net["fc"](x.mean(dim=(2, 3)))


register_backbone("tiny-test")(TinyBackbone)


def make_tiny_model(captions: list[str] | None = None, seed: int = 0):
    """An VSEModel on the tiny backbone (random weights): fast, deterministic."""
    from vsekit.lab.models.joint import JointConfig, JointEmbedding
    from vsekit.lab.text.encoders import TextEncoderConfig
    from vsekit.lab.torch_model import BUNDLE_VERSION, VSEModel
    from vsekit.lab.train.config import ExperimentConfig
    from vsekit.text.tokenizer import tokenize
    from vsekit.text.vocab import Vocabulary

    captions = captions or ["a dog runs on grass", "a red car", "two people in the snow"]
    vocab = Vocabulary.build([tokenize(c) for c in captions])
    cfg = ExperimentConfig(name="tiny")
    cfg.model = JointConfig(text=TextEncoderConfig(word_dim=8, embed_dim=6))
    torch.manual_seed(seed)
    model = JointEmbedding(5, vocab, cfg.model)
    info = {
        "version": BUNDLE_VERSION,
        "config": cfg.to_dict(),
        "img_dim": 5,
        "image": {"backbone": "tiny-test", "weights": "random", "crops": 1,
                  "features": "baseline", "baseline_layer": "fc", "fne": None},
    }  # fmt: skip
    return VSEModel(model, info, captions=captions)


def hubness_bundle(tmp_path: Path, n_photos: int = 6):
    """A tiny model with hubness reduction (its image bank: the photos' own embeddings,
    reversed) and ``n_photos`` photos: ``(bundle dir, photos dir)``."""
    import vsekit
    from vsekit.runtime.hubness import HubnessConfig, write_hubness

    captions = ["a dog runs", "a red car", "people in snow", "a cat", "a bike", "a rock"]
    bundle = make_tiny_model(captions).save(tmp_path / "m")
    photos = tmp_path / "photos"
    for i in range(n_photos):
        write_image(photos / f"{i}.jpg", seed=i)
    m0 = vsekit.load_model(str(bundle), backend="torch")
    bank = m0.encode_image([str(p) for p in sorted(photos.iterdir())])
    write_hubness(bundle, HubnessConfig(beta=1.0, k_text=2, k_image=2, caption_stride=1),
                  bank[::-1], {})  # fmt: skip
    return bundle, photos


def one_photo_service(tmp_path: Path, bundle: Path):
    """``(TestClient, model, collection)``: the service over an index of one photo
    (``tmp_path/photos/0.jpg``) with the model at ``bundle`` (PyTorch backend); set
    ``VSEKIT_CACHE`` first."""
    from fastapi.testclient import TestClient

    import vsekit
    from vsekit.index import Collection, model_info
    from vsekit.serve.app import create_app

    photos = tmp_path / "photos"
    write_image(photos / "0.jpg", seed=3)
    m = vsekit.load_model(str(bundle), backend="torch")
    coll = Collection(tmp_path / "idx", model_info(m, "tiny"))
    coll.update(photos, m.encode_image, progress=False)
    return TestClient(create_app(coll, m), base_url="http://127.0.0.1"), m, coll
