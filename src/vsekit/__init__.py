"""vsekit: visual-semantic embeddings. Put images and sentences in one space.

    import vsekit
    model = vsekit.load_model()              # the shipped default model
    model.encode_text("a dog in the snow")   # [D] float32
    model.encode_image(["a.jpg", "b.jpg"])   # [2, D]
    index = vsekit.open_index("~/.cache/vsekit/index")

This package is the inference core: NumPy, ONNX Runtime, Pillow and SQLite. Training and
research (PyTorch) live in :mod:`vsekit.lab`, which the core never imports. The names
below are imported on first use, so ``import vsekit`` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "Filters",
    "ModelError",
    "OnnxModel",
    "__version__",
    "list_models",
    "load_model",
    "open_index",
]

if TYPE_CHECKING:
    from vsekit.index.api import open_index
    from vsekit.index.filters import Filters
    from vsekit.runtime import ModelError, OnnxModel, list_models, load_model

_WHERE = {
    "Filters": "vsekit.index.filters",
    "ModelError": "vsekit.runtime",
    "OnnxModel": "vsekit.runtime",
    "list_models": "vsekit.runtime",
    "load_model": "vsekit.runtime",
    "open_index": "vsekit.index.api",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        from importlib import import_module

        return getattr(import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'vsekit' has no attribute {name!r}")
