"""Annotation: the best captions for an image from a caption pool, by the model's own
similarity. The pool's embeddings are computed once per model and cached."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..fsio import atomic_write, cache_dir, np_bytes
from ..topk import exact_search

if TYPE_CHECKING:
    from .base import BaseModel


class CaptionPool:
    """``CaptionPool(model).best(img_emb, k)`` -> ``[(caption, score), ...]`` per image.

    ``captions`` defaults to the pool shipped with the model (its training captions).
    Embeddings are cached as ``<cache>/captions/<fingerprint>-<n>.npy``.
    """

    def __init__(
        self, model: BaseModel, captions: Sequence[str] | None = None, cache: bool = True
    ) -> None:
        self.model = model
        # unique captions, first occurrence order: duplicates would crowd the top-k
        self.captions = list(dict.fromkeys(captions if captions is not None else model.captions))
        self._emb = None
        self._cache = cache and captions is None

    @property
    def embeddings(self) -> np.ndarray:
        if self._emb is None:
            path = cache_dir() / "captions" / f"{self.model.fingerprint}-{len(self.captions)}.npy"
            if self._cache and path.is_file():
                self._emb = np.load(path, mmap_mode="r")
            else:
                self._emb = self.model.encode_text(self.captions)
                if self._cache:
                    atomic_write(path, np_bytes(self._emb))
        return self._emb

    def best(self, img_emb: np.ndarray, k: int = 5) -> list[list[tuple[str, float]]]:
        if not self.captions:
            return [[] for _ in range(len(np.atleast_2d(img_emb)))]
        q = np.atleast_2d(np.asarray(img_emb, np.float32))
        if self.model.similarity_name == "cosine":
            scores, rows = exact_search(self.embeddings, q, k)
        else:  # captions are the "text" side of the model's similarity
            scores, rows = exact_search(
                self.embeddings, q, k, score_fn=lambda c, i: self.model.similarity(i, c)
            )
        return [
            [(self.captions[r], float(s)) for s, r in zip(sr, rr, strict=True)]
            for sr, rr in zip(scores, rows, strict=True)
        ]
