"""Annotation: the best captions for an image from a caption pool, by the model's own
similarity. The pool's embeddings are computed once per model and cached."""

from __future__ import annotations

import hashlib
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
    Embeddings are cached as ``<cache>/captions/<fingerprint>-<n>.npy`` (the model's pool)
    or ``<fingerprint>-<n>-<sha256 of the captions>.npy`` (other captions, ``cache=True``).
    With hubness reduction (:attr:`BaseModel.hubness`) captions are ranked by their
    CSLS score: each caption's penalty is computed once with the embeddings.
    """

    def __init__(
        self, model: BaseModel, captions: Sequence[str] | None = None, cache: bool | None = None
    ) -> None:
        self.model = model
        # unique captions, first occurrence order: duplicates would crowd the top-k
        self.captions = list(dict.fromkeys(captions if captions is not None else model.captions))
        self._emb = None
        self._penalty = None
        self._cache = (captions is None) if cache is None else cache
        self._key = str(len(self.captions))  # names the cache file; see also :attr:`key`
        if captions is not None:
            digest = hashlib.sha256("\n".join(self.captions).encode()).hexdigest()[:12]
            self._key += f"-{digest}"

    @property
    def key(self) -> str:
        """Identifies these captions (their number, and their sha256 unless the pool)."""
        return self._key

    @property
    def embeddings(self) -> np.ndarray:
        if self._emb is None:
            path = cache_dir() / "captions" / f"{self.model.fingerprint}-{self._key}.npy"
            if self._cache and path.is_file():
                try:
                    self._emb = np.load(path, mmap_mode="r")
                except (OSError, ValueError):
                    self._emb = None  # a damaged cache file: computed again below
            if self._emb is None or self._emb.shape != (len(self.captions), self.model.embed_dim):
                self._emb = self.model.encode_text(self.captions)
                if self._cache:
                    atomic_write(path, np_bytes(self._emb))
        return self._emb

    def best(self, img_emb: np.ndarray, k: int = 5) -> list[list[tuple[str, float]]]:
        if not self.captions:
            return [[] for _ in range(len(np.atleast_2d(img_emb)))]
        q = np.atleast_2d(np.asarray(img_emb, np.float32))
        if self.model.similarity_name == "cosine":
            if self._penalty is None and self.model.hubness is not None:
                self._penalty = self.model.text_penalty(self.embeddings)
            bias = None if self._penalty is None else -self._penalty
            scores, rows = exact_search(self.embeddings, q, k, bias=bias)
        else:  # captions are the "text" side of the model's similarity
            scores, rows = exact_search(
                self.embeddings, q, k, score_fn=lambda c, i: self.model.similarity(i, c)
            )
        return [
            [(self.captions[r], float(s)) for s, r in zip(sr, rr, strict=True)]
            for sr, rr in zip(scores, rows, strict=True)
        ]
