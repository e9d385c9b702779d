"""Photo-collection index: incremental indexing, exact and FAISS search, annotation."""

from vsekit.index.collection import (
    Collection,
    CollectionError,
    Hit,
    UpdateReport,
    model_info,
    scan_media,
)
from vsekit.index.search import FaissSearcher, exact_search

__all__ = [
    "Collection",
    "CollectionError",
    "FaissSearcher",
    "Hit",
    "UpdateReport",
    "exact_search",
    "model_info",
    "scan_media",
]
