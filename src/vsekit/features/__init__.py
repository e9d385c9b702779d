"""Image features: backbones, crops, extraction to a FeatureStore, FNE, R-MAC."""

from . import arch_efficientnet, arch_resnet, arch_vgg  # noqa: F401  (register backbones)
from .backbones import Backbone, LayerSpec, create_backbone, list_backbones, register_backbone
from .extract import ExtractItem, embed_images, extract_to_store
from .featurizer import ImageFeaturizer
from .fne import FNEStats, full_network_embedding, ternarise
from .rmac import rmac
from .store import FeatureStore, StoreError
from .weights import WeightsError, install_weights

__all__ = [
    "Backbone",
    "ExtractItem",
    "FNEStats",
    "FeatureStore",
    "ImageFeaturizer",
    "LayerSpec",
    "StoreError",
    "WeightsError",
    "create_backbone",
    "embed_images",
    "extract_to_store",
    "full_network_embedding",
    "install_weights",
    "list_backbones",
    "register_backbone",
    "rmac",
    "ternarise",
]
