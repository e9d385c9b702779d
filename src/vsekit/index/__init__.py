"""Photo-collection index: incremental indexing, exact and FAISS search, annotation."""

from .annotate import CaptionPool, model_info
from .collection import Collection, CollectionError, Hit, UpdateReport, scan_images
from .search import FaissSearcher, exact_search

__all__ = [
    "CaptionPool",
    "Collection",
    "CollectionError",
    "FaissSearcher",
    "Hit",
    "UpdateReport",
    "exact_search",
    "model_info",
    "scan_images",
]
