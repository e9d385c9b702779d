"""vsekit: visual-semantic embeddings. Put images and sentences in one space.

    import vsekit
    model = vsekit.load_model()              # the shipped default model
    model.encode_text("a dog in the snow")   # [D] float32
    model.encode_image(["a.jpg", "b.jpg"])   # [2, D]

The names below are imported on first use, so ``import vsekit`` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "ModelError",
    "OnnxModel",
    "VSEModel",
    "__version__",
    "list_models",
    "load_model",
    "registries",
]

if TYPE_CHECKING:
    from .runtime import ModelError, OnnxModel, VSEModel, list_models, load_model


def registries() -> dict[str, Any]:
    """Every pluggable family's ``list_*`` function, by family name."""
    from .data import list_sources
    from .features.backbones import list_backbones
    from .losses import list_losses
    from .models.factory import list_models as list_model_kinds
    from .similarity import list_similarities
    from .text import list_text_encoders

    return {
        "backbones": list_backbones,
        "dataset_formats": list_sources,
        "losses": list_losses,
        "models": list_model_kinds,
        "similarities": list_similarities,
        "text_encoders": list_text_encoders,
    }


def __getattr__(name: str) -> Any:
    if name in ("ModelError", "VSEModel", "OnnxModel", "list_models", "load_model"):
        from . import runtime

        return getattr(runtime, name)
    raise AttributeError(f"module 'vsekit' has no attribute {name!r}")
