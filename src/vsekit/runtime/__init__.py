"""The inference core's model API: :func:`load_model`, :func:`list_models`, and the
backends :class:`VSEModel` (PyTorch) and :class:`OnnxModel` (ONNX Runtime), which share
:class:`BaseModel`'s API. The backends are imported on first use, so the runtime loads
without PyTorch."""

from __future__ import annotations

import importlib
from typing import Any

from .base import BUNDLE_VERSION, BaseModel, ModelError
from .loading import list_models, load_model

__all__ = [
    "BUNDLE_VERSION",
    "BaseModel",
    "ModelError",
    "OnnxModel",
    "VSEModel",
    "list_models",
    "load_model",
]

_LAZY = {"VSEModel": ".model", "OnnxModel": ".onnx_model"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
