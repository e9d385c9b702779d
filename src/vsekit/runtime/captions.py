"""Annotation: the best captions for an image from a caption pool, by the model's own
similarity. The model's own pool comes with the bundle in a compact form when it ships
one (:mod:`vsekit.runtime.compact`); other pools' embeddings are computed once per model
and cached, by one process at a time (the others wait for its file, with progress)."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import sys
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from vsekit.fsio import atomic_write, cache_dir, np_bytes
from vsekit.progress import progress_bar
from vsekit.topk import exact_search

if TYPE_CHECKING:
    from vsekit.runtime.base import BaseModel
    from vsekit.runtime.compact import CompactPool


#: captions embedded per call while a pool is computed (progress is reported per block)
BLOCK = 1024
#: compact rows scored per matrix product (float16 rows widened to float32 per block)
COMPACT_CHUNK = 8192
#: seconds between looks at another process's lock while waiting for its pool
WAIT_POLL = 0.5


class CaptionPool:
    """``CaptionPool(model).best(img_emb, k)`` -> ``[(caption, score), ...]`` per image.

    ``captions`` defaults to the pool shipped with the model (its training captions);
    its embeddings then come from the bundle's compact form when it has one that fits
    (:attr:`BaseModel.compact_pool`): nothing to compute, and captions are ranked in
    its reduced space with the CSLS penalties it ships.
    Embeddings are cached as ``<cache>/captions/<fingerprint>-<n>-<captions' sha256>
    -<content sha256>.npy``: the name changes with the model and with the captions, and a
    file whose bytes no longer hash to its name is never used (it is computed again).
    With hubness reduction (:attr:`BaseModel.hubness`) captions are ranked by their
    CSLS score: each caption's penalty is computed once with the embeddings.

    Computing is done once per pool, whatever the number of threads asking
    (:meth:`prepare`), and once per machine whatever the processes asking: the first
    holds a lock file beside the cache file and writes its progress there; the others
    set :attr:`waiting`, show that progress, and read the cache file when it is done.
    :attr:`progress` tells how far it is, for a service's 503, and a progress bar goes
    to stderr when it is a terminal.
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
        self._own = captions is None  # the model's pool: its compact form may ship
        self._compact: CompactPool | bool | None = None  # False: none
        self._lock_file = None  # the cache's lock file while this pool computes
        #: ``(done, total)`` captions embedded while :meth:`prepare` runs, else None
        self.progress: tuple[int, int] | None = None
        #: set while this pool waits for another process computing the same file
        self.waiting = threading.Event()

    @property
    def key(self) -> str:
        """Identifies these captions (their number and sha256)."""
        return self._key

    @property
    def compact(self) -> CompactPool | None:
        """The shipped compact embeddings this pool ranks with, or None (computed)."""
        if self._compact is None:
            found = getattr(self.model, "compact_pool", None) if self._own else None
            self._compact = found if found is not None else False
        return self._compact or None

    @property
    def ready(self) -> bool:
        """Everything :meth:`best` needs is in memory (it will not compute)."""
        hub_done = self.model.hubness is None or self._penalty is not None
        have = self._emb is not None or self._compact not in (None, False)
        return have and hub_done

    def _cache_files(self, suffix: str) -> list:
        """The cache files of these captions' ``suffix`` array (``<stem>-<16 hex>.npy``:
        never another array's, whose names extend the same stem)."""
        stem = f"{self.model.fingerprint}-{self._key}{suffix}"
        exact = re.compile(re.escape(stem) + r"-[0-9a-f]{16}\.npy$")
        folder = cache_dir() / "captions"
        return [p for p in sorted(folder.glob(f"{stem}-*.npy")) if exact.match(p.name)]

    def on_disk(self) -> bool:
        """The embeddings ship with the model, or a cache file of them exists (not read
        here: verified when used)."""
        if self.compact is not None:
            return True
        return self._cache and bool(self._cache_files(""))

    def prepare(self) -> None:
        """Compute (or read from the bundle or the verified cache) the embeddings and
        penalties, once: a second thread asking meanwhile waits for the first one's
        result, and a second process for the first one's cache file."""
        if self.compact is None:
            self.embeddings  # noqa: B018  (computes)
        self._hub_penalty()

    def _cached(self, suffix: str, shape: tuple[int, ...], compute) -> np.ndarray:
        """``compute()``, or the verified cache file of these captions (written when
        caching): its content's sha256 is in its name, checked on every read."""
        folder = cache_dir() / "captions"
        stem = f"{self.model.fingerprint}-{self._key}{suffix}"
        if not self._cache:
            return self._checked(compute())
        out = self._read_cache(suffix, shape)
        if out is not None:
            return out
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / f"{stem}.lock", "a+") as lock:
            self._acquire(lock)
            try:
                out = self._read_cache(suffix, shape)  # another process's, while we waited
                if out is not None:
                    return out
                self._lock_file = lock
                out = self._checked(compute())
                data = np_bytes(out)
                digest = hashlib.sha256(data).hexdigest()[:16]
                atomic_write(folder / f"{stem}-{digest}.npy", data)
                return out
            finally:
                self._lock_file = None
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read_cache(self, suffix: str, shape: tuple[int, ...]) -> np.ndarray | None:
        for path in self._cache_files(suffix):
            out = _read_verified(path, shape)
            if out is not None:
                return out
        return None

    def _checked(self, out) -> np.ndarray:
        out = np.ascontiguousarray(out, np.float32)
        if not np.isfinite(out).all():
            raise ValueError(f"{self.name}: the model gave non-finite values")
        return out

    def _acquire(self, lock) -> None:
        """Take ``lock`` (a lock file's handle), waiting while another process holds it:
        :attr:`waiting` is set, and that process's progress (which it writes into the
        file) goes to :attr:`progress` and stderr."""
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        self.waiting.set()
        shown, t0 = None, time.perf_counter()
        try:
            while True:
                other = _read_progress(lock)
                if other is not None:
                    self.progress = other
                    if other != shown and (shown is None or time.perf_counter() - t0 > 10):
                        print(f"{self.name}: another vsekit process is computing it, "
                              f"{other[0]:,} of {other[1]:,} captions done; waiting",
                              file=sys.stderr, flush=True)  # fmt: skip
                        shown, t0 = other, time.perf_counter()
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return
                except BlockingIOError:
                    time.sleep(WAIT_POLL)
        finally:
            self.waiting.clear()

    def _encode(self) -> np.ndarray:
        n = len(self.captions)
        out = np.empty((n, self.model.embed_dim), np.float32)
        self.progress = (0, n)
        self._tell(0, n)
        with progress_bar(n, f"{self.name} (once per model)", "caption") as bar:
            for a in range(0, n, BLOCK):
                b = min(a + BLOCK, n)
                out[a:b] = self.model.encode_text(self.captions[a:b])
                self._tell(b, n)
                bar.update(b - a)
        return out

    def _tell(self, done: int, total: int) -> None:
        """Progress, for this process and for those waiting on the lock file."""
        self.progress = (done, total)
        lock = self._lock_file
        if lock is not None:
            with contextlib.suppress(OSError):
                os.pwrite(lock.fileno(), f"{done:>12} {total:>12}\n".encode(), 0)

    @property
    def embeddings(self) -> np.ndarray:
        """``[N, D]`` float32 (rebuilt from the compact form when the bundle ships it)."""
        if self._emb is None and self.compact is not None:
            self._emb = self.compact.rows(slice(None))
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
        if self._penalty is None and self.compact is not None:
            c = self.compact
            with self._lock:
                if self._penalty is None:
                    shipped = c.penalty is not None and c.penalty_key == hub.text_key
                    self._penalty = c.penalty if shipped else _compact_penalty(c, hub)
        if self._penalty is None:
            emb = self.embeddings
            with self._lock:
                if self._penalty is None:
                    self._penalty = self._cached(f"-pen-{hub.key}", (len(self.captions),),
                                                 lambda: hub.text_penalty(emb))  # fmt: skip
        return self._penalty

    def best(self, img_emb: np.ndarray, k: int = 5) -> list[list[tuple[str, float]]]:
        """Each image's ``k`` best captions, ``(caption, score)``, best first."""
        if not self.captions:
            return [[] for _ in range(len(np.atleast_2d(img_emb)))]
        scores, rows = self.best_rows(img_emb, k)
        return [
            [(self.captions[r], float(s)) for s, r in zip(sr, rr, strict=True)]
            for sr, rr in zip(scores, rows, strict=True)
        ]

    def vectors(self, rows: np.ndarray) -> np.ndarray:
        """``[..., D]`` float32: the embeddings of pool rows ``rows`` (any shape), rebuilt
        from the compact form when the bundle ships it (as :meth:`best` scores them)."""
        rows = np.asarray(rows)
        flat = rows.reshape(-1)
        c = self.compact
        out = c.rows(flat) if c is not None else np.asarray(self.embeddings[flat], np.float32)
        return out.reshape(*rows.shape, out.shape[-1])

    def best_rows(self, img_emb: np.ndarray, k: int = 5) -> tuple[np.ndarray, np.ndarray]:
        """``([N, k] scores, [N, k] pool rows)`` of each image's best captions, best
        first (``k`` at most the pool's size)."""
        q = np.atleast_2d(np.asarray(img_emb, np.float32))
        c = self.compact
        if c is not None:  # cosine only: scored in the compact form's reduced space
            pen = self._hub_penalty()
            coords, offset = c.project(q)
            scores, rows = exact_search(c.z, coords, k, chunk=COMPACT_CHUNK,
                                        bias=None if pen is None else -pen)  # fmt: skip
            scores = scores + offset[:, None]
        elif self.model.similarity_name == "cosine":
            pen = self._hub_penalty()
            scores, rows = exact_search(self.embeddings, q, k, bias=None if pen is None else -pen)
        else:  # captions are the "text" side of the model's similarity
            scores, rows = exact_search(
                self.embeddings, q, k, score_fn=lambda c, i: self.model.similarity(i, c)
            )
        return scores, rows


def _compact_penalty(c: CompactPool, hub) -> np.ndarray:
    """``[N]`` CSLS text penalties of the compact rows (when the shipped ones were made
    for other hubness settings), rebuilt in blocks."""
    blocks = range(0, len(c), COMPACT_CHUNK)
    pens = [hub.text_penalty(c.rows(slice(a, a + COMPACT_CHUNK))) for a in blocks]
    return np.concatenate(pens).astype(np.float32)


def _read_progress(lock) -> tuple[int, int] | None:
    """``(done, total)`` as the process computing a pool last wrote it, or None."""
    try:
        parts = os.pread(lock.fileno(), 64, 0).split()
        return (int(parts[0]), int(parts[1])) if len(parts) >= 2 else None
    except (OSError, ValueError):
        return None


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
