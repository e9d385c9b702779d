"""Image features: backbones, crops, extraction to a FeatureStore, FNE, R-MAC.

Names are imported on first use (PEP 562): ``vsekit.fne`` and ``.kinds`` are
NumPy-only and serve the PyTorch-free runtime; the rest needs PyTorch."""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "Backbone": "backbones",
    "LayerSpec": "backbones",
    "create_backbone": "backbones",
    "list_backbones": "backbones",
    "register_backbone": "backbones",
    "ExtractItem": "extract",
    "embed_images": "extract",
    "extract_to_store": "extract",
    "ImageFeaturizer": "featurizer",
    "FNEStats": "fne",
    "full_network_embedding": "fne",
    "ternarise": "fne",
    "rmac": "rmac",
    "FeatureStore": "store",
    "StoreError": "store",
    "WeightsError": "weight_files",
    "install_weights": "weights",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
