"""Image features: backbones, crops, extraction to a FeatureStore, FNE, R-MAC."""

from . import arch_efficientnet, arch_resnet, arch_vgg  # noqa: F401  (register backbones)
from .backbones import Backbone, LayerSpec, create_backbone, list_backbones, register_backbone
from .weights import WeightsError, install_weights

__all__ = [
    "Backbone",
    "LayerSpec",
    "WeightsError",
    "create_backbone",
    "install_weights",
    "list_backbones",
    "register_backbone",
]
