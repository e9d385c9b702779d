"""The inference core's model API: :func:`load_model`, :func:`list_models`, and the
ONNX Runtime backend :class:`OnnxModel`, which implements :class:`BaseModel`'s API. The
PyTorch backend (``vsekit.lab.torch_model.VSEModel``) plugs in from the lab."""

from __future__ import annotations

from vsekit.bundle import BUNDLE_VERSION, ModelError
from vsekit.runtime.base import BaseModel
from vsekit.runtime.loading import list_models, load_model
from vsekit.runtime.onnx_model import OnnxModel

__all__ = [
    "BUNDLE_VERSION",
    "BaseModel",
    "ModelError",
    "OnnxModel",
    "list_models",
    "load_model",
]
