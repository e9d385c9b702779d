"""A photo and video collection index, in three parts behind one class:

* :mod:`vsekit.index.scan` - walking a folder and recognising moved files;
* :mod:`vsekit.index.store` - SQLite plus the crash-safe embeddings file, one writer;
  :mod:`vsekit.index.update` brings it in line with a folder;
* :mod:`vsekit.index.search` over a :class:`~vsekit.index.snapshot.Snapshot` - read-only.

A photo has one row. A video (:data:`vsekit.media.video.VIDEO_SUFFIXES`, with the
``[video]`` extra) has one row for the whole clip (the mean of its frames) and one per
segment of :data:`~vsekit.index.update.SEGMENT_SECONDS`. A search ranks files by their
best row and gives, for a video, the start and end of its best segment.

Every open checks the files against each other: a missing or truncated embeddings file,
rows shared by two files, a damaged or foreign SQLite file, another schema version or
another model is a :class:`CollectionError` that names the file and the command that
repairs it (``vse index FOLDER --repair`` re-embeds only what is missing). An index in a
read-only folder opens read-only and still searches.

Searching writes nothing: the hubness penalties and the FAISS index are read from the
caches ``vse index`` stored (verified, :mod:`vsekit.index.caches`) or computed in
memory. Files are served only while they are still what was indexed
(:meth:`Collection.open_file`).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

from vsekit.fsio import open_no_wait, stored_ns
from vsekit.index import caches
from vsekit.index.files import DB_NAME, LOCK_NAME
from vsekit.index.filters import Filters
from vsekit.index.rebuild import rebuilding
from vsekit.index.scan import inside, printable, scan_media
from vsekit.index.schema import INDEX_VERSION, CollectionError, DamagedIndex, check_model
from vsekit.index.search import FAISS_MIN_ROWS, FaissSearcher, search_snapshot
from vsekit.index.snapshot import Hit, Snapshot
from vsekit.index.store import IndexStore
from vsekit.index.update import FRAME_EVERY, SEGMENT_SECONDS, UpdateReport, update

__all__ = [
    "DB_NAME",
    "FRAME_EVERY",
    "INDEX_VERSION",
    "LOCK_NAME",
    "SEGMENT_SECONDS",
    "Collection",
    "CollectionError",
    "DamagedIndex",
    "FileChanged",
    "FileNotIndexed",
    "Hit",
    "UpdateReport",
    "check_model",
    "inside",
    "model_info",
    "printable",
    "scan_media",
]


def model_info(model, name: str) -> dict:
    """What an index records about ``model``: its name, fingerprint (weights, backbone
    weights' sha256, image side), dim, similarity."""
    return model.describe(name)


class FileNotIndexed(CollectionError):
    """No indexed file has this id, or it is no longer on disk."""


class FileChanged(CollectionError):
    """The file at an indexed path is not the file that was indexed."""


class Collection:
    """Open (or create) the index at ``path``.

    ``model_info``: ``{"name", "fingerprint", "dim", "similarity"}`` of the model the
    embeddings come from; required to create an index, checked when given on open.
    The attributes of the current :class:`Snapshot` (``ids``, ``paths``, ``rows``,
    ``emb``, ``n_rows``, ``generation``, ...) read through; :meth:`refresh` takes a new
    one when a writer has committed.
    """

    def __init__(
        self,
        path: str | Path,
        model_info: dict | None = None,
        repair: bool = False,
        *,
        store: IndexStore | None = None,
    ) -> None:
        self.store = store or IndexStore(path, model_info)
        self.path = self.store.path
        self.read_only = self.store.read_only
        self._snap: Snapshot | None = None
        self._version: int | None = None
        self._faiss: tuple[tuple, FaissSearcher] | None = None
        self._penalties: tuple[tuple, str, np.ndarray] | None = None
        if repair:
            self.store.repair()
        self.store.check()
        self.refresh()

    @classmethod
    def rebuild(cls, path: str | Path, model_info: dict) -> Iterator[Collection]:
        """``with Collection.rebuild(path, info) as coll: coll.update(...)``: a new index
        built beside the one at ``path`` under its writer lock and swapped in when the
        block ends without an error (:func:`vsekit.index.rebuild.rebuilding`); the old
        index is untouched otherwise."""
        return _rebuild(cls, path, model_info)

    # the model's meta, re-read when a rebuild replaces the database
    dim = property(lambda self: self.store.dim)
    model_name = property(lambda self: self.store.model_name)
    fingerprint = property(lambda self: self.store.fingerprint)
    similarity = property(lambda self: self.store.similarity)

    @property
    def db(self):
        """The read-write SQLite connection (tests and repairs; searches never use it)."""
        return self.store._writer_db()

    # -- snapshots -----------------------------------------------------------------
    def refresh(self) -> bool:
        """Take a new snapshot if a writer committed since the last one; True if so."""
        version = self.store.data_version()
        if self._snap is not None and version == self._version:
            return False
        snap = self.store.snapshot()
        changed = self._snap is None or snap.key != self._snap.key
        self._snap, self._version = snap, version
        return changed

    @property
    def snapshot(self) -> Snapshot:
        """The current snapshot (refreshed): one consistent state for a whole request."""
        self.refresh()
        assert self._snap is not None
        return self._snap

    # the last snapshot's fields (as :meth:`refresh` left it; :attr:`snapshot` refreshes)
    def _last(self) -> Snapshot:
        assert self._snap is not None
        return self._snap

    @property
    def ids(self) -> np.ndarray:
        return self._last().ids

    @property
    def paths(self) -> list[str]:
        return self._last().paths

    @property
    def rows(self) -> np.ndarray:
        return self._last().rows

    @property
    def emb(self) -> np.ndarray:
        return self._last().emb

    @property
    def live(self) -> np.ndarray:
        return self._last().live

    @property
    def n_rows(self) -> int:
        return self._last().n_rows

    @property
    def generation(self) -> int:
        return self._last().generation

    @property
    def row_to_pos(self) -> np.ndarray:
        return self._last().row_to_pos

    @property
    def row_start(self) -> np.ndarray:
        return self._last().row_start

    @property
    def row_end(self) -> np.ndarray:
        return self._last().row_end

    @property
    def segment_rows(self) -> dict[int, np.ndarray]:
        return self._last().segment_rows

    def __len__(self) -> int:
        return len(self.snapshot)

    def path_of(self, file_id: int) -> str | None:
        return self.snapshot.path_of(file_id)

    def embedding_of(self, file_id: int) -> np.ndarray | None:
        return self.snapshot.embedding_of(file_id)

    def segments_of(self, file_id: int) -> list[tuple[float, float]]:
        return self.snapshot.segments_of(file_id)

    def roots(self) -> list[str]:
        return self.store.roots(self._snap)

    def failures(self) -> list[tuple[str, str]]:
        return self.store.failures()

    def check(self) -> None:
        self.store.check()

    def open_file(self, file_id: int, snap: Snapshot | None = None):
        """The indexed file as an open binary file, only if it is still the file that was
        indexed: its resolved path inside an indexed folder, a regular file, with the
        indexed size and mtime. FileNotIndexed (unknown id, gone) or FileChanged."""
        snap = snap or self.snapshot
        pos = snap.id_to_pos.get(int(file_id))
        if pos is None:
            raise FileNotIndexed(f"id: no indexed image {file_id}")
        path, (size, mtime) = snap.paths[pos], snap.stamps[pos]
        try:
            real = os.path.realpath(path, strict=True)
        except FileNotFoundError as e:
            raise FileNotIndexed(f"id: image {file_id} is no longer on disk") from e
        except OSError as e:
            raise FileChanged(f"id: image {file_id} cannot be opened ({e.strerror})") from e
        if not any(inside(real, r) for r in self.store.roots(snap)):
            raise FileChanged(f"id: image {file_id} now resolves outside the indexed folders")
        try:
            fd, st = open_no_wait(real)
        except FileNotFoundError as e:
            raise FileNotIndexed(f"id: image {file_id} is no longer on disk") from e
        except OSError as e:
            raise FileChanged(f"id: image {file_id} cannot be opened ({e.strerror})") from e
        if not stat.S_ISREG(st.st_mode) or (st.st_size, stored_ns(st.st_mtime_ns)) != (size, mtime):
            os.close(fd)
            raise FileChanged(
                f"id: image {file_id} changed since it was indexed; run `vse index` again"
            )
        return os.fdopen(fd, "rb")

    # -- writing -------------------------------------------------------------------
    def update(
        self,
        root: str | Path,
        embed: Callable[[Sequence], np.ndarray],
        batch_size: int = 16,
        progress: bool = True,
        on_batch: Callable[[int], None] | None = None,
        reduce_to: int | None = None,
        exclude: Sequence[str] = (),
        batches=None,
        tap=None,
    ) -> UpdateReport:
        """Bring the index in line with the image files under ``root`` (see
        :func:`vsekit.index.update.update`; ``batches``: where embedded batches come
        from, e.g. a Ray cluster; ``tap``: shown each local batch's decoded photos);
        holds the writer lock throughout."""
        root = Path(root).expanduser()
        if not root.is_dir():
            raise CollectionError(f"{root}: not a folder")
        with self.store.writer() as w:
            rep = update(self.store, w, root, embed, batch_size, progress, on_batch,
                         reduce_to, exclude, batches, tap)  # fmt: skip
            rep.replaced = self.store.replaced_at_lock
        self.refresh()
        return rep

    def compact(self, min_garbage: int = 1024) -> bool:
        """Rewrite the embeddings without dead rows when they outnumber the live ones
        (and are at least ``min_garbage``); also removes stray files. True if rewritten."""
        with self.store.writer() as w:
            done = self.store.compact(w, min_garbage)
        self.refresh()
        return done

    def repair(self) -> int:
        n = self.store.repair()
        self.refresh()
        return n

    def store_caches(
        self,
        penalty: Callable[[np.ndarray], np.ndarray] | None = None,
        key: str | None = None,
        faiss: bool | None = None,
    ) -> None:
        """Write the derived caches of the current state under the writer lock: every
        row's hubness penalty (``penalty``, cached as ``key``) and the FAISS index
        (``faiss``; None: from ``FAISS_MIN_ROWS`` live rows). Done by ``vse index``."""
        with self.store.writer() as w:
            snap = self.store.snapshot()
            if penalty is not None and key is not None:
                pen = caches.write_penalties(self.path, w, snap, key, penalty)
                self._penalties = (snap.key, key, pen)
            if faiss or (faiss is None and snap.n_live >= FAISS_MIN_ROWS):
                caches.write_faiss(self.path, w, snap)
        self.refresh()

    # -- reading -------------------------------------------------------------------
    def row_penalties(
        self,
        penalty: Callable[[np.ndarray], np.ndarray],
        key: str,
        snap: Snapshot | None = None,
    ) -> np.ndarray:
        """``[rows]``: ``penalty(embeddings)`` of every row of ``snap`` (a model's CSLS
        image penalty): the verified stored cache, completed in memory for rows it lacks.
        Writes nothing (:meth:`store_caches` does)."""
        snap = snap or self.snapshot
        if self._penalties and self._penalties[:2] == (snap.key, key):
            return self._penalties[2]
        have = caches.cached_penalties(self.path, snap, key)
        pen = caches.complete_penalties(snap, have, penalty)
        self._penalties = (snap.key, key, pen)
        return pen

    def _faiss_for(self, snap: Snapshot) -> FaissSearcher:
        if self._faiss is None or self._faiss[0] != snap.key:
            fs = caches.cached_faiss(self.path, snap) or caches.new_faiss(snap)
            self._faiss = (snap.key, fs)
        return self._faiss[1]

    def search(
        self,
        queries: np.ndarray,
        k: int = 20,
        method: str = "auto",
        score_fn=None,
        bias: np.ndarray | None = None,
        snap: Snapshot | None = None,
        filters: Filters | None = None,
    ) -> list[list[Hit]]:
        """Top-k files for each query vector ``[Q, dim]`` in ``snap`` (default: the
        current snapshot) among those ``filters`` keep; see
        :func:`vsekit.index.search.search_snapshot`."""
        snap = snap or self.snapshot
        allowed = filters.rows(snap) if filters else None
        try:
            return search_snapshot(snap, queries, k, method, score_fn, bias,
                                   lambda: self._faiss_for(snap), allowed)  # fmt: skip
        except DamagedIndex:
            raise
        except ValueError as e:
            raise CollectionError(str(e)) from e

    def close(self) -> None:
        self.store.close()


@contextlib.contextmanager
def _rebuild(cls: type[Collection], path: str | Path, model_info: dict) -> Iterator[Collection]:
    with rebuilding(path, model_info) as store:
        yield cls(store.path, store=store)
