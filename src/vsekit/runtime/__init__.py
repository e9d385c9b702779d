"""The inference core's model API: :func:`load_model`, :func:`list_models`, and the
ONNX Runtime backend :class:`OnnxModel`, which implements :class:`BaseModel`'s API. The
PyTorch backend (``vsekit.lab.torch_model.VSEModel``) plugs in from the lab."""

from __future__ import annotations

import importlib
from typing import Any

from vsekit.bundle import BUNDLE_VERSION, ModelError
from vsekit.runtime.base import BaseModel
from vsekit.runtime.loading import list_models, load_model

__all__ = [
    "BUNDLE_VERSION",
    "BaseModel",
    "ModelError",
    "OnnxModel",
    "list_models",
    "load_model",
]

_LAZY = {"OnnxModel": ".onnx_model"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
