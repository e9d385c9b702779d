"""One consistent, immutable view of an index for readers.

:func:`read_snapshot` reads the metadata, the files, the video segments and maps the
embeddings file inside one SQLite read transaction: a writer cannot commit in between
(the index uses a rollback journal, so a commit waits for readers' shared locks), and the
embeddings file it maps is the one that generation's rows live in. A search works on one
snapshot from start to end, so it never mixes two states of the index.
"""

from __future__ import annotations

import functools
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vsekit.index.checksums import bad_rows, read_sums
from vsekit.index.rows import emb_path, for_scattered_reads, open_rows
from vsekit.index.scan import printable
from vsekit.index.schema import DamagedIndex
from vsekit.topk import dot_scores


@dataclass(frozen=True)
class Hit:
    id: int
    path: str
    score: float
    start: float | None = None  # videos: the best segment, in seconds
    end: float | None = None
    #: the other copies of this photo among the results, best first (stacked search:
    #: :mod:`vsekit.index.stacking`); empty when it has none or results are not stacked
    copies: tuple[Hit, ...] = ()
    #: a text search's relevance cue: strong | weak | none (:mod:`vsekit.runtime.relevance`);
    #: None where the model ships no calibration, and for searches by image
    cue: str | None = None


@dataclass(eq=False)
class Snapshot:
    """The committed state of an index at one moment.

    ``ids``, ``paths``, ``rows``, ``stamps`` (size, mtime_ns): one entry per file, by id.
    ``emb``: ``[n_rows, dim]`` float32 rows (memory-mapped; with ``int8`` storage an
    :class:`~vsekit.index.rows.Int8Rows` that dequantises the rows it is asked for).
    ``live``: ``[n_rows]`` rows in use.
    ``row_to_pos``: row -> file position; ``row_start``/``row_end``: a segment row's times
    (NaN for whole-file rows); ``segment_rows``: file position -> its segments' rows.
    ``key`` identifies the state: equal keys, equal snapshots.
    """

    key: tuple
    generation: int
    n_rows: int
    dim: int
    ids: np.ndarray
    paths: list[str]
    rows: np.ndarray
    stamps: list[tuple[int, int]]
    emb: np.ndarray
    live: np.ndarray
    row_to_pos: np.ndarray
    row_start: np.ndarray
    row_end: np.ndarray
    segment_rows: dict[int, np.ndarray]
    roots: list[str] | None
    meta: dict[str, str] = field(repr=False)
    id_to_pos: dict[int, int] = field(repr=False)
    #: per file (by position): its :class:`~vsekit.media.exif.PhotoMeta` fields, None
    #: (NaN for lat/lon) where unknown
    photo_meta: dict[str, list] = field(repr=False, default_factory=dict)
    #: each row's checksum and whether it has one (:mod:`vsekit.index.checksums`)
    crc: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, np.uint32))
    crc_known: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, bool))
    emb_file: Path | None = None
    storage: str = "f32"
    unit_rows: bool = False

    def verify(self, rows) -> None:
        """DamagedIndex (naming the files and ``--repair``) if any of ``rows`` changed
        since it was written: every row a result is read from is checked."""
        rows = np.asarray(rows, np.int64).reshape(-1)
        if not len(self.crc_known) or not len(rows):
            return
        bad = bad_rows(self.emb, rows, self.crc, self.crc_known, self.unit_rows, self.storage)
        if len(bad):
            names = ", ".join(printable(self.paths[int(self.row_to_pos[r])]) for r in bad[:3])
            index = self.emb_file.parent if self.emb_file is not None else "INDEX"
            raise DamagedIndex(
                f"{self.emb_file}: the embeddings of {names} changed since they were "
                f"written (the file is damaged); run `vse index FOLDER --index {index} "
                "--repair` to re-embed them"
            )

    def __len__(self) -> int:
        return len(self.ids)

    @functools.cached_property
    def live_bits(self) -> np.ndarray:
        """``live`` packed one bit a row (little-endian), for FAISS's bitmap selector."""
        return np.packbits(self.live, bitorder="little")

    @functools.cached_property
    def scattered(self):
        """The rows again, for reading a few hundred scattered ones at a time (re-ranking
        approximate candidates): :class:`~vsekit.index.rows.ScatteredRows`; made at the
        first such search, by the file's name, so when a compaction or rebuild has removed
        that file since this snapshot was read, the snapshot's own mapping instead."""
        try:
            return for_scattered_reads(self.emb)
        except OSError:
            return self.emb

    @property
    def n_live(self) -> int:
        return int(self.live.sum())

    def path_of(self, file_id: int) -> str | None:
        pos = self.id_to_pos.get(int(file_id))
        return None if pos is None else self.paths[pos]

    def embedding_of(self, file_id: int) -> np.ndarray | None:
        pos = self.id_to_pos.get(int(file_id))
        if pos is None:
            return None
        self.verify([self.rows[pos]])
        return np.array(self.emb[self.rows[pos]])

    def segments_of(self, file_id: int) -> list[tuple[float, float]]:
        """``[(start, end)]`` of an indexed video's segments (empty for a photo)."""
        pos = self.id_to_pos.get(int(file_id))
        rows = self.segment_rows.get(pos, np.zeros(0, np.int64)) if pos is not None else []
        return [(float(self.row_start[r]), float(self.row_end[r])) for r in sorted(rows)]

    def hits(self, scores: np.ndarray, rows: np.ndarray, k: int) -> list[Hit]:
        """The first ``k`` distinct files of a ranked row list (a file's best row)."""
        out, seen, read = [], set(), []
        for s, r in zip(scores, rows, strict=True):
            if r < 0:
                continue
            pos = int(self.row_to_pos[r])
            if pos in seen:
                continue
            seen.add(pos)
            read.append(r)
            start, end = self.row_start[r], self.row_end[r]
            out.append(
                Hit(int(self.ids[pos]), self.paths[pos], float(s),
                    None if np.isnan(start) else float(start),
                    None if np.isnan(end) else float(end))
            )  # fmt: skip
            if len(out) == k:
                break
        self.verify(read)
        return out

    def with_best_segment(self, hit: Hit, query: np.ndarray, score_fn=None, bias=None) -> Hit:
        """A video hit ranked by its whole-clip row gets its best segment's times."""
        pos = self.id_to_pos[hit.id]
        rows = self.segment_rows.get(pos)
        if rows is None or hit.start is not None:
            return hit
        self.verify(rows)
        emb = np.asarray(self.emb[rows])
        score = score_fn or dot_scores
        s = np.asarray(score(emb, query[None])).reshape(-1)
        if bias is not None:
            s = s + bias[rows]
        best = int(rows[int(np.argmax(s))])
        return Hit(hit.id, hit.path, hit.score, float(self.row_start[best]),
                   float(self.row_end[best]))  # fmt: skip


def _segments(db: sqlite3.Connection) -> list[tuple]:
    """``(file_id, row, start, end)`` of every video segment (none in an index made
    before videos, opened read-only)."""
    try:
        return db.execute("SELECT file_id, row, start, end FROM segments").fetchall()
    except sqlite3.OperationalError:
        return []


META_FIELDS = (
    "taken", "taken_from", "make", "model", "lat", "lon", "sha256", "phash", "phash_crops"
)  # fmt: skip


def _photo_meta(db: sqlite3.Connection) -> list[tuple]:
    """``(file_id, *META_FIELDS)`` of every file that has them (none in an index made
    before they were recorded, opened read-only)."""
    # a table from before crop hashes, perceptual hashes or content hashes (read-only
    # here: no writer migrated it) lacks the last fields: None for them
    for missing in range(4):
        cols = META_FIELDS[: len(META_FIELDS) - missing]
        try:
            rows = db.execute(f"SELECT file_id, {', '.join(cols)} FROM photo_meta").fetchall()
        except sqlite3.OperationalError:
            continue
        return [(*r, *[None] * missing) for r in rows]
    return []


def meta_arrays(m: dict[str, list], n: int) -> dict[str, np.ndarray]:
    """The metadata as arrays for vectorised filters: ``taken`` ISO text (``""`` when
    unknown), ``camera_of`` (index into ``cameras``: distinct lower-case "make model"),
    ``lat``/``lon`` (NaN when unknown)."""
    names = [f"{a or ''} {b or ''}".strip().lower() for a, b in zip(m["make"], m["model"],
                                                                    strict=True)]  # fmt: skip
    cameras, camera_of = np.unique(np.asarray(names + [""], dtype=str), return_inverse=True)
    return {
        "taken": np.asarray([t or "" for t in m["taken"]], dtype="<U19"),
        "cameras": cameras,
        "camera_of": np.asarray(camera_of, np.int64).reshape(-1)[:n],
        "lat": np.asarray([np.nan if v is None else v for v in m["lat"]], np.float64),
        "lon": np.asarray([np.nan if v is None else v for v in m["lon"]], np.float64),
    }


def read_snapshot(db: sqlite3.Connection, index: Path, dim: int) -> Snapshot:
    """Everything a reader needs, read in one transaction (see the module docstring)."""
    import json

    db.execute("BEGIN")
    try:
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
        gen, n_rows = int(meta["generation"]), int(meta["rows"])
        files = db.execute("SELECT id, path, row, size, mtime_ns FROM files ORDER BY id").fetchall()
        seg = np.array(_segments(db), np.float64).reshape(-1, 4)
        pmeta = _photo_meta(db)
        storage = meta.get("storage", "f32")
        f = emb_path(index, gen, storage)
        if n_rows and f.is_file():
            emb = open_rows(f, n_rows, dim, storage)
        else:
            emb = np.zeros((0, dim), np.float32)
        crc, crc_known = read_sums(db, n_rows, gen)
        version = db.execute("PRAGMA data_version").fetchone()[0]
    finally:
        db.execute("COMMIT")
    ids = np.asarray([r[0] for r in files], np.int64)
    paths = [r[1] for r in files]
    rows = np.asarray([r[2] for r in files], np.int64)
    stamps = [(r[3], r[4]) for r in files]
    id_to_pos = {int(i): k for k, i in enumerate(ids)}
    seg_rows = seg[:, 1].astype(np.int64)
    live = np.zeros(n_rows, bool)
    live[rows] = True
    live[seg_rows] = True
    row_to_pos = np.full(n_rows, -1, np.int64)
    row_to_pos[rows] = np.arange(len(rows))
    row_to_pos[seg_rows] = [id_to_pos[int(i)] for i in seg[:, 0]]
    row_start = np.full(n_rows, np.nan)
    row_end = np.full(n_rows, np.nan)
    row_start[seg_rows], row_end[seg_rows] = seg[:, 2], seg[:, 3]
    seg_pos = row_to_pos[seg_rows]
    order = np.argsort(seg_pos, kind="stable")
    cuts = np.flatnonzero(np.diff(seg_pos[order])) + 1
    segment_rows = {
        int(seg_pos[part[0]]): seg_rows[part] for part in np.split(order, cuts) if len(part)
    }
    roots = json.loads(meta["roots"]) if "roots" in meta else None
    photo_meta: dict[str, list] = {f: [None] * len(ids) for f in META_FIELDS}
    for row in pmeta:
        pos = id_to_pos.get(int(row[0]))
        if pos is not None:
            for f, v in zip(META_FIELDS, row[1:], strict=True):
                photo_meta[f][pos] = v
    photo_meta["arrays"] = meta_arrays(photo_meta, len(ids))
    photo_meta["recorded"] = bool(pmeta) or not len(ids)  # False: made before metadata
    return Snapshot(
        key=(gen, n_rows, version, len(ids), int(rows.sum()) if len(rows) else 0),
        generation=gen,
        n_rows=n_rows,
        dim=dim,
        ids=ids,
        paths=paths,
        rows=rows,
        stamps=stamps,
        emb=emb,
        live=live,
        row_to_pos=row_to_pos,
        row_start=row_start,
        row_end=row_end,
        segment_rows=segment_rows,
        roots=roots,
        meta=meta,
        id_to_pos=id_to_pos,
        photo_meta=photo_meta,
        crc=crc,
        crc_known=crc_known,
        emb_file=Path(f),
        storage=storage,
        unit_rows=meta.get("similarity", "cosine") == "cosine",
    )
