"""Datasets, tokenisation and vocabulary."""

from vsekit.lab.data.coco import load_coco
from vsekit.lab.data.dataset import Caption, Dataset, DatasetError, FeatureRows, ImageRecord
from vsekit.lab.data.flickr8k import load_flickr8k
from vsekit.lab.data.folder import load_folder
from vsekit.lab.data.karpathy import load_karpathy
from vsekit.lab.data.precomp import load_precomp
from vsekit.lab.data.sources import detect_format, list_sources, load_dataset, register_source
from vsekit.lab.data.stats import dataset_stats
from vsekit.text.tokenizer import tokenize
from vsekit.text.vocab import Vocabulary

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
