"""The lab: training and research on PyTorch (the ``[train]`` extra).

Backbones and their weights, the Full-Network Embedding, feature stores, datasets, text
encoders, models, losses, the trainer, metrics, tag mining and the ONNX exporter. The lab
imports the core (:mod:`vsekit`); the core never imports the lab. The PyTorch model
backend, :class:`vsekit.lab.torch_model.VSEModel`, registers itself with
:func:`vsekit.load_model` through the ``vsekit.backends`` entry point; import it from
there. This package re-exports nothing, so ``import vsekit.lab`` (which ``vse`` does for
the lab's commands) never loads PyTorch."""

from __future__ import annotations

from typing import Any


def registries() -> dict[str, Any]:
    """Every pluggable family's ``list_*`` function, by family name."""
    from vsekit.lab.data import list_sources
    from vsekit.lab.features.backbones import list_backbones
    from vsekit.lab.losses import list_losses
    from vsekit.lab.models.factory import list_models as list_model_kinds
    from vsekit.lab.similarity import list_similarities
    from vsekit.lab.text import list_text_encoders

    return {
        "backbones": list_backbones,
        "dataset_formats": list_sources,
        "losses": list_losses,
        "models": list_model_kinds,
        "similarities": list_similarities,
        "text_encoders": list_text_encoders,
    }
