"""The inference core's model API: :func:`load_model`, :func:`list_models`, :class:`VSEModel`."""

from .model import BUNDLE_VERSION, ModelError, VSEModel, list_models, load_model

__all__ = ["BUNDLE_VERSION", "ModelError", "VSEModel", "list_models", "load_model"]
