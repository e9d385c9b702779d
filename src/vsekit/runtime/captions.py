"""Annotation: the best captions for an image from a caption pool, by the model's own
similarity. The pool's embeddings are computed once per model and cached."""

from __future__ import annotations

import contextlib
import hashlib
import re
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from vsekit.fsio import atomic_write, cache_dir, np_bytes
from vsekit.progress import progress_bar
from vsekit.topk import exact_search

if TYPE_CHECKING:
    from vsekit.runtime.base import BaseModel


#: captions embedded per call while a pool is computed (progress is reported per block)
BLOCK = 1024


class CaptionPool:
    """``CaptionPool(model).best(img_emb, k)`` -> ``[(caption, score), ...]`` per image.

    ``captions`` defaults to the pool shipped with the model (its training captions).
    Embeddings are cached as ``<cache>/captions/<fingerprint>-<n>-<captions' sha256>
    -<content sha256>.npy``: the name changes with the model and with the captions, and a
    file whose bytes no longer hash to its name is never used (it is computed again).
    With hubness reduction (:attr:`BaseModel.hubness`) captions are ranked by their
    CSLS score: each caption's penalty is computed once with the embeddings.

    Computing is done once per pool, whatever the number of threads asking
    (:meth:`prepare`); :attr:`progress` tells how far it is, for a service's 503, and a
    progress bar goes to stderr when it is a terminal.
    """

    def __init__(
        self,
        model: BaseModel,
        captions: Sequence[str] | None = None,
        cache: bool | None = None,
        name: str = "caption pool",
    ) -> None:
        self.model = model
        # unique captions, first occurrence order: duplicates would crowd the top-k
        self.captions = list(dict.fromkeys(captions if captions is not None else model.captions))
        self.name = name
        self._emb = None
        self._penalty = None
        self._cache = (captions is None) if cache is None else cache
        digest = hashlib.sha256("\n".join(self.captions).encode()).hexdigest()[:12]
        self._key = f"{len(self.captions)}-{digest}"
        self._lock = threading.Lock()
        #: ``(done, total)`` captions embedded while :meth:`prepare` runs, else None
        self.progress: tuple[int, int] | None = None

    @property
    def key(self) -> str:
        """Identifies these captions (their number and sha256)."""
        return self._key

    @property
    def ready(self) -> bool:
        """Everything :meth:`best` needs is in memory (it will not compute)."""
        hub_done = self.model.hubness is None or self._penalty is not None
        return self._emb is not None and hub_done

    def _cache_files(self, suffix: str) -> list:
        """The cache files of these captions' ``suffix`` array (``<stem>-<16 hex>.npy``:
        never another array's, whose names extend the same stem)."""
        stem = f"{self.model.fingerprint}-{self._key}{suffix}"
        exact = re.compile(re.escape(stem) + r"-[0-9a-f]{16}\.npy$")
        folder = cache_dir() / "captions"
        return [p for p in sorted(folder.glob(f"{stem}-*.npy")) if exact.match(p.name)]

    def on_disk(self) -> bool:
        """A cache file of these embeddings exists (not read here: verified when used)."""
        return self._cache and bool(self._cache_files(""))

    def prepare(self) -> None:
        """Compute (or read from the verified cache) the embeddings and penalties, once:
        a second thread asking meanwhile waits for the first one's result."""
        self.embeddings  # noqa: B018  (computes)
        self._hub_penalty()

    def _cached(self, suffix: str, shape: tuple[int, ...], compute) -> np.ndarray:
        """``compute()``, or the verified cache file of these captions (written when
        caching): its content's sha256 is in its name, checked on every read."""
        folder = cache_dir() / "captions"
        stem = f"{self.model.fingerprint}-{self._key}{suffix}"
        for path in self._cache_files(suffix) if self._cache else []:
            out = _read_verified(path, shape)
            if out is not None:
                return out
        out = np.ascontiguousarray(compute(), np.float32)
        if not np.isfinite(out).all():
            raise ValueError(f"{self.name}: the model gave non-finite values")
        if self._cache:
            data = np_bytes(out)
            digest = hashlib.sha256(data).hexdigest()[:16]
            atomic_write(folder / f"{stem}-{digest}.npy", data)
        return out

    def _encode(self) -> np.ndarray:
        n = len(self.captions)
        out = np.empty((n, self.model.embed_dim), np.float32)
        self.progress = (0, n)
        with progress_bar(n, f"{self.name} (once per model)", "caption") as bar:
            for a in range(0, n, BLOCK):
                b = min(a + BLOCK, n)
                out[a:b] = self.model.encode_text(self.captions[a:b])
                self.progress = (b, n)
                bar.update(b - a)
        return out

    @property
    def embeddings(self) -> np.ndarray:
        if self._emb is None:
            with self._lock:
                if self._emb is None:
                    try:
                        shape = (len(self.captions), self.model.embed_dim)
                        self._emb = self._cached("", shape, self._encode)
                    finally:
                        self.progress = None
        return self._emb

    def _hub_penalty(self) -> np.ndarray | None:
        """Each caption's CSLS penalty (none without hubness reduction), cached on disk
        under the settings' key: against a 1,000-image bank, 30,000 captions take 1 s."""
        hub = self.model.hubness
        if hub is None:
            return None
        if self._penalty is None:
            emb = self.embeddings
            with self._lock:
                if self._penalty is None:
                    self._penalty = self._cached(f"-pen-{hub.key}", (len(self.captions),),
                                                 lambda: hub.text_penalty(emb))  # fmt: skip
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


def _read_verified(path, shape: tuple[int, ...]) -> np.ndarray | None:
    """The array in ``path`` if its bytes hash to the digest in its name and it has
    ``shape``; else None (a file whose bytes do not match is removed: it is damaged)."""
    try:
        with open(path, "rb") as fh:
            digest = hashlib.file_digest(fh, "sha256").hexdigest()
    except OSError:
        return None
    if digest[:16] != path.stem.rsplit("-", 1)[-1]:
        with contextlib.suppress(OSError):
            path.unlink()
        return None
    try:
        out = np.load(path, mmap_mode="r")
    except (OSError, ValueError):
        return None
    return out if out.shape == shape and out.dtype == np.float32 else None
