"""Annotation: the best captions for an image from a caption pool, by the model's own
similarity. The pool's embeddings are computed once per model and cached."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from vsekit.fsio import atomic_write, cache_dir, np_bytes
from vsekit.topk import exact_search

if TYPE_CHECKING:
    from vsekit.runtime.base import BaseModel


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

    def _cached(self, suffix: str, shape: tuple[int, ...], compute) -> np.ndarray:
        """``compute()``, read from ``<cache>/captions/<fingerprint>-<key><suffix>.npy``
        when caching and that file holds an array of ``shape`` (else written there)."""
        path = cache_dir() / "captions" / f"{self.model.fingerprint}-{self._key}{suffix}.npy"
        if self._cache and path.is_file():
            try:
                out = np.load(path, mmap_mode="r")
                if out.shape == shape:
                    return out
            except (OSError, ValueError):
                pass  # a damaged cache file: computed again below
        out = compute()
        if self._cache:
            atomic_write(path, np_bytes(out))
        return out

    @property
    def embeddings(self) -> np.ndarray:
        if self._emb is None:
            shape = (len(self.captions), self.model.embed_dim)
            self._emb = self._cached("", shape, lambda: self.model.encode_text(self.captions))
        return self._emb

    def _hub_penalty(self) -> np.ndarray | None:
        """Each caption's CSLS penalty (none without hubness reduction), cached on disk
        under the settings' key: against a 1,000-image bank, 30,000 captions take 1 s."""
        hub = self.model.hubness
        if hub is None:
            return None
        if self._penalty is None:
            self._penalty = self._cached(f"-pen-{hub.key}", (len(self.captions),),
                                         lambda: hub.text_penalty(self.embeddings))  # fmt: skip
        return self._penalty

    def best(self, img_emb: np.ndarray, k: int = 5) -> list[list[tuple[str, float]]]:
        if not self.captions:
            return [[] for _ in range(len(np.atleast_2d(img_emb)))]
        q = np.atleast_2d(np.asarray(img_emb, np.float32))
        if self.model.similarity_name == "cosine":
            pen = self._hub_penalty()
            scores, rows = exact_search(self.embeddings, q, k, bias=None if pen is None else -pen)
        else:  # captions are the "text" side of the model's similarity
            scores, rows = exact_search(
                self.embeddings, q, k, score_fn=lambda c, i: self.model.similarity(i, c)
            )
        return [
            [(self.captions[r], float(s)) for s, r in zip(sr, rr, strict=True)]
            for sr, rr in zip(scores, rows, strict=True)
        ]
