"""Datasets, tokenisation and vocabulary."""

from .coco import load_coco
from .dataset import Caption, Dataset, DatasetError, FeatureRows, ImageRecord
from .flickr8k import load_flickr8k
from .folder import load_folder
from .karpathy import load_karpathy
from .precomp import load_precomp
from .sources import detect_format, list_sources, load_dataset, register_source
from .stats import dataset_stats
from .tokenizer import tokenize
from .vocab import Vocabulary

__all__ = [
    "Caption",
    "Dataset",
    "DatasetError",
    "FeatureRows",
    "ImageRecord",
    "Vocabulary",
    "dataset_stats",
    "detect_format",
    "list_sources",
    "load_coco",
    "load_dataset",
    "load_flickr8k",
    "load_folder",
    "load_karpathy",
    "load_precomp",
    "register_source",
    "tokenize",
]
