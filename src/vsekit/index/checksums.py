"""Checksums of the stored embedding rows, so that any change to a committed row is seen.

Each row of ``emb-<gen>.*`` has a CRC-32 (:func:`zlib.crc32`) of its bytes as the file
holds them (float32 values, or int8 values and their scale). The checksums of a batch
are one row of the ``sums`` table (``start``: its first row; ``crcs``: little-endian
uint32, one per row), written in the same transaction that makes the rows reachable, so
a committed row always has its checksum. A compaction writes the new generation's
checksums in the transaction that switches to it.

They are verified at every open (:meth:`vsekit.index.integrity.Integrity.check`, up to
its scan budget), over the whole file by ``vse index --repair``, and on every read of a
result: the rows a search returns are checked before their files are
(:meth:`vsekit.index.snapshot.Snapshot.hits`), a few microseconds a row of 2,048 float32
values (0.2 ms for 20 results; a full check at open reads about 1 to 2 GB/s).

Rows committed before checksums were kept have none: they are held to a weaker check
(finite values; unit norm where the index's rows are unit vectors) and get their
checksum from the next writer that finds them sound (:func:`backfill`).
"""

from __future__ import annotations

import sqlite3
import zlib

import numpy as np

from vsekit.index.rows import Int8Rows

#: a row's norm may differ from 1 by this much in an index of unit rows (int8 rows
#: carry their quantisation error: under 1% on the default model's rows)
NORM_TOLERANCE = {"f32": 1e-3, "int8": 0.05}


def raw_rows(emb) -> np.ndarray:
    """``[n, row_bytes]`` uint8: the stored bytes of ``emb`` (a float32 array or
    memmap, or :class:`~vsekit.index.rows.Int8Rows`), without copying a memmap."""
    if isinstance(emb, Int8Rows):
        return emb.raw
    a = np.asarray(emb)
    return a.reshape(len(a), -1).view(np.uint8) if len(a) else np.zeros((0, 0), np.uint8)


def crcs_of(raw: np.ndarray) -> np.ndarray:
    """``[n]`` uint32: the CRC-32 of each row of ``raw`` (``[n, row_bytes]`` uint8), read
    through row views (no copy of a memory-mapped file)."""
    return np.fromiter((zlib.crc32(r) for r in raw), np.uint32, len(raw))


def encoded_crcs(data: bytes, row_bytes: int) -> np.ndarray:
    """The checksums of rows given as the bytes written to the file."""
    raw = np.frombuffer(data, np.uint8)
    return crcs_of(raw.reshape(-1, row_bytes)) if len(raw) else np.zeros(0, np.uint32)


def record(w: sqlite3.Connection, start: int, crcs: np.ndarray) -> None:
    """Record the checksums of rows ``start .. start + len(crcs)`` (the caller commits)."""
    if len(crcs):
        w.execute(
            "INSERT OR REPLACE INTO sums (start, crcs) VALUES (?, ?)",
            (int(start), np.asarray(crcs, "<u4").tobytes()),
        )


def record_blocks(
    w: sqlite3.Connection, crcs: np.ndarray, generation: int, block: int = 4096
) -> None:
    """Replace every checksum by ``crcs``: the rows of a new ``generation``, from row 0."""
    restart(w, generation)
    for a in range(0, len(crcs), block):
        record(w, a, crcs[a : a + block])


def restart(w: sqlite3.Connection, generation: int) -> None:
    """Forget every checksum; those recorded from now on are ``generation``'s rows'."""
    w.execute("DELETE FROM sums")
    w.execute(
        "INSERT OR REPLACE INTO meta (key, value) VALUES ('sums_generation', ?)",
        (str(int(generation)),),
    )


def forget_from(w: sqlite3.Connection, row: int) -> None:
    """Drop the checksums of batches starting at or past ``row`` (rows cut off the end)."""
    w.execute("DELETE FROM sums WHERE start >= ?", (int(row),))


def sums_valid(db: sqlite3.Connection, generation: int) -> bool:
    """The recorded checksums are the rows of ``generation``'s file: ``meta``'s
    ``sums_generation`` says so (a vsekit without checksums that compacted the index
    moved its rows without them, and did not say so)."""
    row = db.execute("SELECT value FROM meta WHERE key = 'sums_generation'").fetchone()
    return row is not None and int(row[0]) == int(generation)


def read_sums(
    db: sqlite3.Connection, n_rows: int, generation: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(crc, known)``, both ``[n_rows]``: each row's recorded checksum, and whether it
    has one (not in an index made before checksums, nor when the checksums are another
    generation's; later batches win an overlap)."""
    crc = np.zeros(n_rows, np.uint32)
    known = np.zeros(n_rows, bool)
    if not sums_valid(db, generation):
        return crc, known
    try:
        blobs = db.execute("SELECT start, crcs FROM sums ORDER BY start").fetchall()
    except sqlite3.OperationalError:  # no table: an index from before checksums, read-only
        return crc, known
    for start, blob in blobs:
        part = np.frombuffer(blob, "<u4")[: max(0, n_rows - start)]
        crc[start : start + len(part)] = part
        known[start : start + len(part)] = True
    return crc, known


def bad_rows(
    emb,
    rows: np.ndarray,
    crc: np.ndarray,
    known: np.ndarray,
    unit: bool,
    storage: str,
    block: int = 4096,
) -> np.ndarray:
    """The rows among ``rows`` whose bytes no longer match their checksum, or, for a row
    without one, that hold a non-finite value or (``unit``) a norm away from 1. Read in
    blocks of ``block`` rows: memory stays bounded whatever the file's size."""
    rows = np.unique(np.asarray(rows, np.int64))
    raw = raw_rows(emb)
    bad: list[int] = []
    for a in range(0, len(rows), block):
        part = rows[a : a + block]
        has = known[part]
        bad += [int(r) for r in part[has] if zlib.crc32(raw[r]) != crc[r]]
        legacy = part[~has]
        if not len(legacy):
            continue
        vecs = np.asarray(emb[legacy], np.float32)  # at most ``block`` rows
        with np.errstate(over="ignore", invalid="ignore"):
            ok = np.isfinite(vecs).all(axis=1)
            if unit:
                norm = np.sqrt(np.einsum("ij,ij->i", vecs, vecs))
                ok &= np.abs(norm - 1.0) <= NORM_TOLERANCE[storage]
        bad += legacy[~ok].tolist()
    return np.asarray(sorted(bad), np.int64)


def backfill(
    w: sqlite3.Connection, emb, rows: np.ndarray, known: np.ndarray, block: int = 4096
) -> int:
    """Record checksums for the rows among ``rows`` (sound ones: the caller checked
    them) that have none; returns how many."""
    todo = np.sort(np.asarray(rows, np.int64)[~known[rows]])
    if not len(todo):
        return 0
    raw = raw_rows(emb)
    # consecutive runs, each one ``sums`` row
    cuts = np.flatnonzero(np.diff(todo) != 1) + 1
    for run in np.split(todo, cuts):
        for a in range(0, len(run), block):
            part = run[a : a + block]
            record(w, int(part[0]), crcs_of(raw[part]))
    return len(todo)
