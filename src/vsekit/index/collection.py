"""A photo and video collection index: SQLite metadata plus a memory-mapped embedding
matrix.

Layout of an index directory::

    index.sqlite      meta (model, dim, generation, committed rows), files, segments, failed
    emb-<gen>.f32     float32 rows of ``dim`` columns, append-only within a generation

A photo has one row. A video (:data:`vsekit.media.video.VIDEO_SUFFIXES`, with the ``[video]``
extra) has one row for the whole clip (``files.row``, the mean of its frames) and one
per segment of :data:`SEGMENT_SECONDS` (``segments``: file, row, start, end), from one
frame every :data:`FRAME_EVERY` seconds. A search ranks files by their best row and
gives, for a video, the start and end of its best segment.

Crash safety (a ``kill -9`` at any moment leaves a usable index):

* embeddings are appended and fsync'ed *before* the SQLite transaction that makes them
  reachable (files rows + ``meta.rows``) commits, so committed rows always exist on disk;
  bytes past ``meta.rows`` are leftovers of an interrupted batch and are cut on the
  next write;
* compaction (dropping rows of deleted or re-embedded files) writes ``emb-<gen+1>.f32``
  in full, then switches generation in one transaction; a stray file of another
  generation is removed on the next write.

One writer at a time: ``update``, ``compact`` and ``repair`` hold an exclusive lock on
``index.lock`` (a second ``vse index`` waits for the first), so two writers never read the
same row count. Readers need no lock.

Every open checks the files against each other: a missing or truncated embeddings file,
rows shared by two files, a damaged or foreign SQLite file, another schema version or
another model is a :class:`CollectionError` that names the file and the command that
repairs it (``vse index FOLDER --repair`` re-embeds only what is missing). An index in a
read-only folder opens read-only and still searches.

Files are served only while they are still what was indexed (:meth:`Collection.open_file`):
inside an indexed folder once symbolic links are resolved, a regular file, with the
indexed size and mtime.

Incremental updates: a file is re-embedded only when its path is new or its size or
mtime changed; a file that failed to decode is remembered with its size and mtime
and not retried until it changes. A moved or renamed file (a new path whose name, size
and mtime match exactly one indexed file that is gone from its old path, and no other
new path) keeps its id and embedding: moving a photo folder costs no re-embedding.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import sqlite3
import stat
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vsekit.fsio import atomic_write, exclusive_lock
from vsekit.index.search import FAISS_MIN_ROWS, FaissSearcher, exact_search, rerank
from vsekit.media.images import IMAGE_SUFFIXES, ImageError, load_image
from vsekit.media.video import (
    INSTALL_HINT,
    VIDEO_SUFFIXES,
    Sampling,
    embed_video,
    is_video,
    video_support,
)
from vsekit.topk import dot_scores

INDEX_VERSION = 1
DB_NAME = "index.sqlite"
LOCK_NAME = "index.lock"

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    path TEXT UNIQUE NOT NULL,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    row INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS segments (
    file_id INTEGER NOT NULL,
    row INTEGER NOT NULL,
    start REAL NOT NULL,
    end REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS segments_file ON segments (file_id);
CREATE TABLE IF NOT EXISTS failed (
    path TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    error TEXT NOT NULL
);
"""
#: every embedding row in use: files' own rows and their video segments' rows
ALL_ROWS = "SELECT row FROM files UNION ALL SELECT row FROM segments"

SEGMENT_SECONDS = 2.0  # a video is searchable per segment of this length
FRAME_EVERY = 1.0  # one frame embedded every this many seconds of video


def model_info(model, name: str) -> dict:
    """What an index records about ``model`` (a :class:`~vsekit.runtime.VSEModel`): its
    name, fingerprint (weights, backbone weights' sha256, image side), dim, similarity."""
    return model.describe(name)


class CollectionError(ValueError):
    """An index could not be opened or does not fit the model; names the path."""


class FileNotIndexed(CollectionError):
    """No indexed file has this id, or it is no longer on disk."""


class FileChanged(CollectionError):
    """The file at an indexed path is not the file that was indexed."""


@dataclass(frozen=True)
class Hit:
    id: int
    path: str
    score: float
    start: float | None = None  # videos: the best segment, in seconds
    end: float | None = None


@dataclass
class UpdateReport:
    scanned: int = 0
    added: int = 0
    updated: int = 0
    removed: int = 0
    moved: int = 0
    unchanged: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)  # (path, error)
    embedded: int = 0  # images (and video frames) that went through the model
    seconds: float = 0.0

    def summary(self) -> str:
        return (
            f"{self.scanned} files: {self.added} added, {self.updated} updated, "
            f"{self.removed} removed, {self.moved} moved, {self.unchanged} unchanged, "
            f"{len(self.failed)} failed "
            f"({self.seconds:.1f} s)"
        )


def printable(path: str) -> str:
    """A path that can be printed and stored: undecodable bytes as ``\\xNN``."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def inside(path: str, root: str) -> bool:
    """``path`` is ``root`` or below it (both resolved)."""
    return path == root or path.startswith(os.path.join(root, ""))


def _excluded(rel: str, patterns: Sequence[str]) -> bool:
    """``rel`` (a path below the scanned folder) or its file name matches a pattern."""
    name = os.path.basename(rel)
    return any(fnmatch.fnmatch(rel, g) or fnmatch.fnmatch(name, g) for g in patterns)


def scan_media(
    root: Path,
    skipped: list[tuple[str, str]] | None = None,
    exclude: Sequence[str] = (),
) -> Iterator[tuple[str, int, int]]:
    """``(absolute path, size, mtime_ns)`` of every regular image or video file under ``root``,
    sorted. What cannot be indexed is appended to ``skipped`` as ``(path, reason)``: file
    names that are not UTF-8, FIFOs, devices and sockets named like images (never opened,
    so nothing hangs), broken symbolic links and loops, symbolic links to files outside
    ``root`` (they could not be served), unreadable folders. Symbolic links to folders
    are not followed."""
    skipped = skipped if skipped is not None else []
    real_root = os.path.realpath(root)
    videos = video_support()

    def unreadable(e: OSError) -> None:
        skipped.append((printable(str(e.filename)), f"unreadable folder ({e.strerror})"))

    for dirpath, dirnames, filenames in os.walk(root, onerror=unreadable):
        dirnames.sort()
        for name in sorted(filenames):
            if not name.lower().endswith(IMAGE_SUFFIXES + VIDEO_SUFFIXES) or name.startswith("."):
                continue
            p = os.path.abspath(os.path.join(dirpath, name))
            if exclude and _excluded(os.path.relpath(p, root), exclude):
                continue
            if not videos and is_video(name):
                skipped.append((printable(p), INSTALL_HINT))
                continue
            try:
                p.encode("utf-8")
            except UnicodeEncodeError:
                skipped.append((printable(p), "file name is not valid UTF-8"))
                continue
            try:
                st = os.stat(p)
            except FileNotFoundError:
                if os.path.islink(p):
                    skipped.append((p, "broken symbolic link"))
                continue  # else it vanished during the scan
            except OSError as e:
                skipped.append((p, f"cannot be read ({e.strerror})"))
                continue
            if not stat.S_ISREG(st.st_mode):
                skipped.append((p, "not a regular file (a FIFO, device or socket)"))
                continue
            if os.path.islink(p) and not inside(os.path.realpath(p), real_root):
                skipped.append((p, "symbolic link to a file outside the folder"))
                continue
            yield p, st.st_size, st.st_mtime_ns


def _match_moves(
    vanished: Sequence[str],
    new: Sequence[tuple[str, int, int]],
    known: dict[str, tuple[int, int, int]],
) -> dict[str, str]:
    """``{new path: old path}`` for files that were moved or renamed: the file name, size
    and mtime (which ``mv`` and folder moves keep) identify exactly one vanished indexed
    file and exactly one new path. Ambiguous keys are left to be re-embedded."""

    def key(path: str, size: int, mtime: int) -> tuple[str, int, int]:
        return os.path.basename(path), size, mtime

    old_by_key: dict[tuple, list[str]] = {}
    for p in vanished:
        old_by_key.setdefault(key(p, known[p][1], known[p][2]), []).append(p)
    new_by_key: dict[tuple, list[str]] = {}
    for p, size, mtime in new:
        new_by_key.setdefault(key(p, size, mtime), []).append(p)
    return {
        ps[0]: old_by_key[k][0]
        for k, ps in new_by_key.items()
        if len(ps) == 1 and len(old_by_key.get(k, ())) == 1
    }


class Collection:
    """Open (or create) the index at ``path``.

    ``model_info``: ``{"name", "fingerprint", "dim", "similarity"}`` of the model the
    embeddings come from; required to create an index, checked when given on open.
    """

    def __init__(
        self, path: str | Path, model_info: dict | None = None, repair: bool = False
    ) -> None:
        self.path = Path(path).expanduser()
        if self.path.exists() and not self.path.is_dir():
            raise CollectionError(f"{self.path}: is a file, not an index folder")
        db = self.path / DB_NAME
        if not db.is_file():
            if model_info is None:
                raise CollectionError(f"{self.path}: no index here (run `vse index DIR` first)")
            self.path.mkdir(parents=True, exist_ok=True)
        self.read_only = not os.access(self.path, os.W_OK) or not os.access(db, os.W_OK | os.F_OK)
        self.read_only = self.read_only and db.is_file()
        rebuild = f"rebuild it with `vse index FOLDER --index {self.path} --rebuild`"
        try:
            meta = self._connect(db)
            if not meta:
                if model_info is None or any(self.path.glob("emb-*.f32")) or self.read_only:
                    raise CollectionError(f"{db}: an empty or foreign index database; {rebuild}")
                with self.db:
                    self._set_meta(
                        version=INDEX_VERSION,
                        model=model_info["name"],
                        fingerprint=model_info["fingerprint"],
                        dim=int(model_info["dim"]),
                        similarity=model_info.get("similarity", "cosine"),
                        generation=0,
                        rows=0,
                    )
                meta = self._meta()
            missing = {"version", "model", "fingerprint", "dim", "generation", "rows"} - set(meta)
            if missing:
                raise CollectionError(f"{db}: not a vsekit index (no {sorted(missing)}); {rebuild}")
        except sqlite3.DatabaseError as e:
            raise CollectionError(f"{db}: damaged or not an index database ({e}); {rebuild}") from e
        if int(meta.get("version", -1)) != INDEX_VERSION:
            raise CollectionError(
                f"{db}: index version {meta.get('version')} is not supported; {rebuild}"
            )
        if model_info is not None and model_info["fingerprint"] != meta["fingerprint"]:
            raise CollectionError(
                f"{self.path}: built with model {meta['model']!r} ({meta['fingerprint']}), "
                f"not {model_info['name']!r} ({model_info['fingerprint']}); "
                "use that model or rebuild the index with --rebuild"
            )
        self.dim = int(meta["dim"])
        self.model_name = meta["model"]
        self.fingerprint = meta["fingerprint"]
        self.similarity = meta.get("similarity", "cosine")
        self._snapshot_key = None
        self._faiss = None
        self._penalties: dict[Path, np.ndarray] = {}
        if repair:
            self.repair()
        self.check()
        self.refresh()

    def _connect(self, db: Path) -> dict[str, str]:
        if self.read_only:  # a read-only folder or file: search it as it is
            uri = f"file:{db}?mode=ro&immutable=1"
            self.db = sqlite3.connect(uri, uri=True, check_same_thread=False)
        else:
            self.db = sqlite3.connect(db, timeout=30, check_same_thread=False)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.executescript(SCHEMA)
        return self._meta()

    def check(self) -> None:
        """CollectionError naming the file and the repair command if the embeddings file
        does not hold every committed row or two files share a row."""
        meta = self._meta()
        gen, n_rows = int(meta["generation"]), int(meta["rows"])
        f = self._emb_path(gen)
        repair = f"run `vse index FOLDER --index {self.path} --repair` to re-embed what is missing"
        size = f.stat().st_size if f.is_file() else None
        if n_rows and size is None:
            raise CollectionError(f"{f}: missing, the index has {n_rows} embeddings; {repair}")
        if size is not None and size < n_rows * self.dim * 4:
            raise CollectionError(
                f"{f}: truncated ({size} bytes for {n_rows} rows of {self.dim}); {repair}"
            )
        n, distinct, top = self.db.execute(
            "SELECT COUNT(*), COUNT(DISTINCT row), COALESCE(MAX(row), -1) "
            f"FROM ({self._all_rows()})"
        ).fetchone()
        if n != distinct or top >= n_rows:
            raise CollectionError(
                f"{self.path / DB_NAME}: {n - distinct} files share an embedding row and "
                f"{top >= n_rows and 'some point past the last row' or 'none past it'}; {repair}"
            )

    def repair(self) -> int:
        """Drop what the embeddings file does not hold (rows past its end, rows shared by
        two files) so that the next update re-embeds exactly those files; returns how
        many files were dropped."""
        with self._writer():
            meta = self._meta()
            gen, n_rows = int(meta["generation"]), int(meta["rows"])
            f = self._emb_path(gen)
            present = (f.stat().st_size // (self.dim * 4)) if f.is_file() else 0
            keep = min(n_rows, present)
            with self.db:
                bad_rows = f"""SELECT row FROM ({ALL_ROWS}) GROUP BY row
                               HAVING COUNT(*) > 1 OR row >= {int(keep)}"""
                bad = self.db.execute(
                    f"""SELECT id FROM files WHERE row IN ({bad_rows}) UNION
                        SELECT file_id FROM segments WHERE row IN ({bad_rows})"""
                ).fetchall()
                n0 = self.db.execute("SELECT COUNT(*) FROM files").fetchone()[0]
                self.db.executemany("DELETE FROM segments WHERE file_id = ?", bad)
                self.db.executemany("DELETE FROM files WHERE id = ?", bad)
                self._set_meta(rows=keep)
                dropped = n0 - self.db.execute("SELECT COUNT(*) FROM files").fetchone()[0]
            with open(f, "ab") as fh:
                fh.truncate(keep * self.dim * 4)
                os.fsync(fh.fileno())
            return dropped

    @contextlib.contextmanager
    def _writer(self) -> Iterator[None]:
        """The index's one-writer lock (blocks while another process holds it)."""
        if self.read_only:
            raise CollectionError(f"{self.path}: the index is read-only here; cannot update it")
        waiting = f"{self.path}: another process is updating this index; waiting"
        with exclusive_lock(self.path / LOCK_NAME, wait=waiting):
            yield

    # -- metadata ------------------------------------------------------------------
    def _meta(self) -> dict[str, str]:
        return dict(self.db.execute("SELECT key, value FROM meta").fetchall())

    def _set_meta(self, **kv) -> None:
        self.db.executemany(
            "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
            [(k, str(v)) for k, v in kv.items()],
        )

    def _emb_path(self, gen: int) -> Path:
        return self.path / f"emb-{gen}.f32"

    def refresh(self) -> bool:
        """Re-read the committed state if another process changed it; True if it did."""
        meta = self._meta()
        key = (meta["generation"], meta["rows"], self.db.total_changes, self._data_version())
        if key == self._snapshot_key:
            return False
        gen, n_rows = int(meta["generation"]), int(meta["rows"])
        cur = self.db.execute("SELECT id, path, row, size, mtime_ns FROM files ORDER BY id")
        ids, paths, rows, stamps = [], [], [], []
        for i, p, r, size, mtime in cur:
            ids.append(i)
            paths.append(p)
            rows.append(r)
            stamps.append((size, mtime))
        self._stamps = stamps
        self.ids = np.asarray(ids, np.int64)
        self.paths = paths
        self.rows = np.asarray(rows, np.int64)
        self.generation, self.n_rows = gen, n_rows
        self._id_to_pos = {int(i): k for k, i in enumerate(ids)}
        seg = self._segments_table()
        seg = np.array(seg, np.float64).reshape(-1, 4)
        seg_rows = seg[:, 1].astype(np.int64)
        self.live = np.zeros(n_rows, bool)
        self.live[self.rows] = True
        self.live[seg_rows] = True
        self.row_to_pos = np.full(n_rows, -1, np.int64)
        self.row_to_pos[self.rows] = np.arange(len(self.rows))
        self.row_to_pos[seg_rows] = [self._id_to_pos[int(i)] for i in seg[:, 0]]
        self.row_start = np.full(n_rows, np.nan)
        self.row_end = np.full(n_rows, np.nan)
        self.row_start[seg_rows], self.row_end[seg_rows] = seg[:, 2], seg[:, 3]
        # file position -> the rows of its segments
        seg_pos = self.row_to_pos[seg_rows]
        order = np.argsort(seg_pos, kind="stable")
        cuts = np.flatnonzero(np.diff(seg_pos[order])) + 1
        self.segment_rows = {
            int(seg_pos[part[0]]): seg_rows[part] for part in np.split(order, cuts) if len(part)
        }
        f = self._emb_path(gen)
        if n_rows and f.is_file():
            self.emb = np.memmap(f, np.float32, mode="r", shape=(n_rows, self.dim))
        else:
            self.emb = np.zeros((0, self.dim), np.float32)
        self._snapshot_key = key
        self._faiss = None
        return True

    def _segments_table(self) -> list[tuple]:
        """``(file_id, row, start, end)`` of every video segment (none in an index made
        before videos, opened read-only)."""
        try:
            return self.db.execute("SELECT file_id, row, start, end FROM segments").fetchall()
        except sqlite3.OperationalError:
            return []

    def _all_rows(self) -> str:
        """SQL for every row in use (files' and segments')."""
        has = self.db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'segments'"
        ).fetchone()
        return ALL_ROWS if has else "SELECT row FROM files"

    def _data_version(self) -> int:
        return self.db.execute("PRAGMA data_version").fetchone()[0]

    def __len__(self) -> int:
        return len(self.ids)

    def path_of(self, file_id: int) -> str | None:
        pos = self._id_to_pos.get(int(file_id))
        return None if pos is None else self.paths[pos]

    def open_file(self, file_id: int):
        """The indexed file as an open binary file, only if it is still the file that was
        indexed: its resolved path inside an indexed folder, a regular file, with the
        indexed size and mtime. FileNotIndexed (unknown id, gone) or FileChanged."""
        pos = self._id_to_pos.get(int(file_id))
        if pos is None:
            raise FileNotIndexed(f"id: no indexed image {file_id}")
        path, (size, mtime) = self.paths[pos], self._stamps[pos]
        real = os.path.realpath(path)
        if not any(inside(real, r) for r in self.roots()):
            raise FileChanged(f"id: image {file_id} now resolves outside the indexed folders")
        try:
            fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        except FileNotFoundError as e:
            raise FileNotIndexed(f"id: image {file_id} is no longer on disk") from e
        except OSError as e:
            raise FileChanged(f"id: image {file_id} cannot be opened ({e.strerror})") from e
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_size, st.st_mtime_ns) != (size, mtime):
            os.close(fd)
            raise FileChanged(
                f"id: image {file_id} changed since it was indexed; run `vse index` again"
            )
        return os.fdopen(fd, "rb")

    def embedding_of(self, file_id: int) -> np.ndarray | None:
        pos = self._id_to_pos.get(int(file_id))
        return None if pos is None else np.array(self.emb[self.rows[pos]])

    def failures(self) -> list[tuple[str, str]]:
        return self.db.execute("SELECT path, error FROM failed ORDER BY path").fetchall()

    # -- updating ------------------------------------------------------------------
    def update(
        self,
        root: str | Path,
        embed: Callable[[Sequence], np.ndarray],
        batch_size: int = 16,
        progress: bool = True,
        on_batch: Callable[[int], None] | None = None,
        reduce_to: int | None = None,
        exclude: Sequence[str] = (),
    ) -> UpdateReport:
        """Bring the index in line with the image files under ``root``.

        ``embed(list of PIL images) -> [n, dim]`` unit vectors. Files outside ``root``
        that are already indexed are left alone. ``reduce_to``: decode JPEGs at reduced
        size down to this short side (the model's ``decode_size``).
        """
        root = Path(root).expanduser()
        if not root.is_dir():
            raise CollectionError(f"{root}: not a folder")
        with self._writer():
            return self._update(root, embed, batch_size, progress, on_batch, reduce_to, exclude)

    def _update(
        self, root, embed, batch_size, progress, on_batch, reduce_to, exclude
    ) -> UpdateReport:
        t0 = time.perf_counter()
        rep = UpdateReport()
        self._add_root(root)
        prefix = os.path.join(os.path.abspath(root), "")
        known = {
            p: (i, s, m)
            for i, p, s, m in self.db.execute("SELECT id, path, size, mtime_ns FROM files")
        }
        failed = {
            p: (s, m) for p, s, m in self.db.execute("SELECT path, size, mtime_ns FROM failed")
        }
        seen, todo, skipped = set(), [], []
        for p, size, mtime in scan_media(root, skipped, exclude):
            rep.scanned += 1
            seen.add(p)
            k = known.get(p)
            if k is not None and (k[1], k[2]) == (size, mtime):
                rep.unchanged += 1
            elif k is None and failed.get(p) == (size, mtime):
                rep.failed.append((p, "unchanged since it failed"))
            else:
                todo.append((p, size, mtime))
        rep.failed.extend(skipped)
        gone = [p for p in known if p.startswith(prefix) and p not in seen]
        gone_failed = [p for p in failed if p.startswith(prefix) and p not in seen]
        moves: dict[str, str] = {}
        new = [t for t in todo if t[0] not in known]
        if new:  # only new paths can be moves; then look for vanished files to match
            outside_gone = [p for p in known if not p.startswith(prefix) and not os.path.exists(p)]
            moves = _match_moves(gone + outside_gone, new, known)
            todo = [t for t in todo if t[0] not in moves]
            moved_from = set(moves.values())
            gone = [p for p in gone if p not in moved_from]
        with self.db:
            self.db.executemany(
                "UPDATE files SET path = ? WHERE path = ?", [(n, o) for n, o in moves.items()]
            )
            self.db.executemany(
                "DELETE FROM segments WHERE file_id IN (SELECT id FROM files WHERE path = ?)",
                [(p,) for p in gone],
            )
            self.db.executemany("DELETE FROM files WHERE path = ?", [(p,) for p in gone])
            self.db.executemany("DELETE FROM failed WHERE path = ?", [(p,) for p in gone_failed])
        rep.removed, rep.moved = len(gone), len(moves)

        bar = None
        if progress and todo:
            from tqdm import tqdm

            bar = tqdm(total=len(todo), desc="index", unit="file")
        sampling = Sampling(every=FRAME_EVERY)
        for a in range(0, len(todo), batch_size):
            batch = todo[a : a + batch_size]
            images, ok, errors, videos = [], [], [], []
            for p, size, mtime in batch:
                try:
                    if is_video(p):
                        v = embed_video(p, embed, sampling, SEGMENT_SECONDS, reduce_to,
                                        batch_size, self.similarity == "cosine")  # fmt: skip
                        videos.append(((p, size, mtime), v))
                        rep.embedded += v.frames
                    else:
                        images.append(load_image(p, reduce_to))
                        ok.append((p, size, mtime))
                except ImageError as e:
                    errors.append((p, size, mtime, str(e)))
            vecs = embed(images) if images else np.zeros((0, self.dim), np.float32)
            rep.embedded += len(images)
            vecs = np.asarray(vecs, np.float32).reshape(-1, self.dim)
            if videos:
                ok += [f for f, _ in videos]
                vecs = np.concatenate([vecs, *(v.clip[None] for _, v in videos)])
            segs = [None] * (len(ok) - len(videos)) + [v for _, v in videos]
            self._commit_batch(ok, vecs, errors, known, rep, segs)
            if bar is not None:
                bar.update(len(batch))
            if on_batch is not None:
                on_batch(a + len(batch))
        if bar is not None:
            bar.close()
        self._compact()
        self.refresh()
        rep.seconds = time.perf_counter() - t0
        return rep

    def _commit_batch(self, ok, vecs, errors, known, rep: UpdateReport, segs=None) -> None:
        """Append ``vecs`` (one row per file in ``ok``) and, for videos (``segs[j]`` a
        :class:`~vsekit.media.video.VideoVectors`), their segment rows after them; then make
        them reachable in one transaction."""
        if vecs.shape != (len(ok), self.dim):
            raise CollectionError(
                f"embedder returned {vecs.shape}, expected ({len(ok)}, {self.dim})"
            )
        segs = segs or [None] * len(ok)
        extra = [v.segments for v in segs if v is not None]
        meta = self._meta()
        gen, n_rows = int(meta["generation"]), int(meta["rows"])
        f = self._emb_path(gen)
        with open(f, "ab") as fh:
            fh.truncate(n_rows * self.dim * 4)  # drop bytes of an interrupted batch
            fh.seek(0, os.SEEK_END)
            for block in (vecs, *extra):
                fh.write(np.ascontiguousarray(block, np.float32).tobytes())
            fh.flush()
            os.fsync(fh.fileno())
        next_row = n_rows + len(ok)
        with self.db:
            for j, (p, size, mtime) in enumerate(ok):
                if p in known:
                    self.db.execute(
                        "UPDATE files SET size = ?, mtime_ns = ?, row = ? WHERE path = ?",
                        (size, mtime, n_rows + j, p),
                    )
                    file_id = known[p][0]
                    self.db.execute("DELETE FROM segments WHERE file_id = ?", (file_id,))
                    rep.updated += 1
                else:
                    cur = self.db.execute(
                        "INSERT INTO files (path, size, mtime_ns, row) VALUES (?, ?, ?, ?)",
                        (p, size, mtime, n_rows + j),
                    )
                    file_id = cur.lastrowid
                    rep.added += 1
                v = segs[j]
                if v is not None:
                    rows = range(next_row, next_row + len(v.segments))
                    self.db.executemany(
                        "INSERT INTO segments (file_id, row, start, end) VALUES (?, ?, ?, ?)",
                        [(file_id, r, float(s), float(e))
                         for r, s, e in zip(rows, v.starts, v.ends, strict=True)],
                    )  # fmt: skip
                    next_row += len(v.segments)
                self.db.execute("DELETE FROM failed WHERE path = ?", (p,))
            for p, size, mtime, err in errors:
                self.db.execute(
                    "INSERT OR REPLACE INTO failed (path, size, mtime_ns, error) "
                    "VALUES (?, ?, ?, ?)",
                    (p, size, mtime, err),
                )
                rep.failed.append((p, err))
            self._set_meta(rows=next_row)

    def compact(self, min_garbage: int = 1024) -> bool:
        """Rewrite the embeddings without dead rows when they outnumber the live ones
        (and are at least ``min_garbage``); also removes stray files. True if rewritten."""
        with self._writer():
            done = self._compact(min_garbage)
        self.refresh()
        return done

    def _add_root(self, root: Path) -> None:
        roots = set(self.roots())
        real = os.path.realpath(root)
        if real not in roots:
            with self.db:
                self._set_meta(roots=json.dumps(sorted(roots | {real})))

    def roots(self) -> list[str]:
        """The folders this index was built from (resolved); files are served only from
        inside them. Indexes from before roots were recorded use each file's folder."""
        raw = self._meta().get("roots")
        if raw is not None:
            return json.loads(raw)
        return sorted({os.path.realpath(os.path.dirname(p)) for p in self.paths})

    def _compact(self, min_garbage: int = 1024) -> bool:
        meta = self._meta()
        gen, n_rows = int(meta["generation"]), int(meta["rows"])
        for stray in self.path.glob("emb-*.f32"):
            if stray.name != self._emb_path(gen).name:
                stray.unlink(missing_ok=True)
        live = self.db.execute(
            "SELECT 'f', id, row FROM files UNION ALL SELECT 's', rowid, row FROM segments"
        ).fetchall()
        garbage = n_rows - len(live)
        if garbage < max(min_garbage, len(live)):
            return False
        old = np.memmap(self._emb_path(gen), np.float32, mode="r", shape=(n_rows, self.dim))
        new_path = self._emb_path(gen + 1)
        with open(new_path, "wb") as fh:
            for a in range(0, len(live), 65_536):
                rows = [r for _, _, r in live[a : a + 65_536]]
                fh.write(np.ascontiguousarray(old[rows]).tobytes())
            fh.flush()
            os.fsync(fh.fileno())
        del old
        with self.db:
            new_rows = [(t, j, i) for j, (t, i, _) in enumerate(live)]
            self.db.executemany(
                "UPDATE files SET row = ? WHERE id = ?",
                [(j, i) for t, j, i in new_rows if t == "f"],
            )
            self.db.executemany(
                "UPDATE segments SET row = ? WHERE rowid = ?",
                [(j, i) for t, j, i in new_rows if t == "s"],
            )
            self._set_meta(generation=gen + 1, rows=len(live))
        self._emb_path(gen).unlink(missing_ok=True)
        return True

    # -- searching -----------------------------------------------------------------
    def row_penalties(self, penalty: Callable[[np.ndarray], np.ndarray], key: str) -> np.ndarray:
        """``[rows]``: ``penalty(embeddings)`` of every row (a model's CSLS image
        penalty, :meth:`BaseModel.image_penalty`), cached in ``pen-<generation>-<key>.f32``
        and computed only for the rows appended since (rows never change within a
        generation). A read-only index computes them in memory."""
        self.refresh()
        path = self.path / f"pen-{self.generation}-{key}.f32"
        cached = self._penalties.get(path)
        if cached is None and path.is_file():
            cached = np.fromfile(path, np.float32)
        if cached is None or len(cached) > self.n_rows:
            cached = np.zeros(0, np.float32)
        if len(cached) < self.n_rows:
            new = [penalty(np.asarray(self.emb[a : min(a + 4096, self.n_rows)]))
                   for a in range(len(cached), self.n_rows, 4096)]  # fmt: skip
            cached = np.concatenate([cached, *(np.asarray(x, np.float32) for x in new)])
            if not self.read_only:
                try:
                    atomic_write(path, cached.tobytes())
                    for old in self.path.glob("pen-*.f32"):
                        if old != path:
                            old.unlink(missing_ok=True)
                except OSError:
                    pass  # still searches; computes them again next time
        self._penalties = {path: cached}
        return cached

    def search(
        self,
        queries: np.ndarray,
        k: int = 20,
        method: str = "auto",
        score_fn=None,
        bias: np.ndarray | None = None,
    ) -> list[list[Hit]]:
        """Top-k files for each query vector ``[Q, dim]``, a file scoring its best row;
        a video hit carries the start and end of its best segment.

        ``bias``: ``[rows]`` added to every query's score of each row (a negated CSLS
        penalty, :meth:`row_penalties`). FAISS then re-ranks its ``4k + 100`` best rows
        by the biased score.

        ``method``: ``exact`` (one chunked matrix product), ``faiss`` (IVF, built on first
        use and kept until the index changes) or ``auto`` (FAISS from
        ``FAISS_MIN_ROWS`` live rows, for dot-product models only).
        """
        self.refresh()
        q = np.atleast_2d(np.asarray(queries, np.float32))
        dot = score_fn is None
        if method == "auto":
            method = "faiss" if dot and len(self) >= FAISS_MIN_ROWS else "exact"
        if method == "faiss":
            if not dot:
                raise CollectionError("FAISS search needs a dot-product (cosine) model")
            if self._faiss is None:
                self._faiss = self._faiss_searcher()

            def top_rows(k_rows: int):
                if bias is None:
                    return self._faiss.search(q, k_rows)
                _, cand = self._faiss.search(q, min(4 * k_rows + 100, n_live))
                return rerank(self.emb, q, cand, bias, k_rows)
        elif method == "exact":
            kw = {} if dot else {"score_fn": score_fn}
            kw["bias"] = bias

            def top_rows(k_rows: int):
                return exact_search(self.emb, q, k_rows, self.live, **kw)
        else:
            raise ValueError(f"unknown search method {method!r}; use auto | exact | faiss")
        n_live = int(self.live.sum())
        # a file can own several rows (a video's segments): ask for more rows until k
        # distinct files are found or every row has been ranked
        k_rows = min(k, n_live) if not self.segment_rows else min(4 * k + 16, n_live)
        while True:
            scores, rows = top_rows(max(k_rows, 1))
            out = [self._hits(srow, rrow, k) for srow, rrow in zip(scores, rows, strict=True)]
            if k_rows >= n_live or all(len(h) >= k for h in out):
                break
            k_rows = min(2 * k_rows, n_live)
        return [
            [self._with_best_segment(h, qv, score_fn, bias) for h in hits]
            for hits, qv in zip(out, q, strict=True)
        ]

    def _hits(self, scores: np.ndarray, rows: np.ndarray, k: int) -> list[Hit]:
        """The first ``k`` distinct files of a ranked row list (a file's best row)."""
        hits, seen = [], set()
        for s, r in zip(scores, rows, strict=True):
            if r < 0:
                continue
            pos = int(self.row_to_pos[r])
            if pos in seen:
                continue
            seen.add(pos)
            start, end = self.row_start[r], self.row_end[r]
            hits.append(
                Hit(int(self.ids[pos]), self.paths[pos], float(s),
                    None if np.isnan(start) else float(start),
                    None if np.isnan(end) else float(end))
            )  # fmt: skip
            if len(hits) == k:
                break
        return hits

    def _with_best_segment(self, hit: Hit, query: np.ndarray, score_fn=None, bias=None) -> Hit:
        """A video hit ranked by its whole-clip row gets its best segment's times."""
        pos = self._id_to_pos[hit.id]
        rows = self.segment_rows.get(pos)
        if rows is None or hit.start is not None:
            return hit
        emb = np.asarray(self.emb[rows])
        score = score_fn or dot_scores
        s = np.asarray(score(emb, query[None])).reshape(-1)
        if bias is not None:
            s = s + bias[rows]
        best = int(rows[int(np.argmax(s))])
        return Hit(hit.id, hit.path, hit.score, float(self.row_start[best]),
                   float(self.row_end[best]))  # fmt: skip

    def segments_of(self, file_id: int) -> list[tuple[float, float]]:
        """``[(start, end)]`` of an indexed video's segments (empty for a photo)."""
        pos = self._id_to_pos.get(int(file_id))
        rows = self.segment_rows.get(pos, np.zeros(0, np.int64)) if pos is not None else []
        return [(float(self.row_start[r]), float(self.row_end[r])) for r in sorted(rows)]

    def _faiss_searcher(self) -> FaissSearcher:
        """The FAISS index of the current state, read from disk if it was built before
        (``faiss-<generation>-<rows>-<live>.index``), else built and saved."""
        path = self.path / f"faiss-{self.generation}-{self.n_rows}-{len(self)}.index"
        if path.is_file():
            try:
                return FaissSearcher.load(path)
            except RuntimeError:
                path.unlink(missing_ok=True)  # unreadable: rebuild below
        fs = FaissSearcher(self.emb, self.live)
        try:
            fs.save(path)
            for old in self.path.glob("faiss-*.index"):
                if old != path:
                    old.unlink(missing_ok=True)
        except OSError:
            pass  # a read-only index still searches, it just rebuilds next time
        return fs

    def close(self) -> None:
        self.db.close()
