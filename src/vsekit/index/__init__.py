"""Photo-collection index: scan, store (crash-safe, one writer) and read-only search."""

from vsekit.index.api import PhotoIndex, open_index
from vsekit.index.collection import (
    Collection,
    CollectionError,
    DamagedIndex,
    Hit,
    UpdateReport,
    model_info,
    scan_media,
)
from vsekit.index.search import FaissSearcher, exact_search

__all__ = [
    "Collection",
    "CollectionError",
    "DamagedIndex",
    "FaissSearcher",
    "Hit",
    "PhotoIndex",
    "UpdateReport",
    "exact_search",
    "model_info",
    "open_index",
    "scan_media",
]
