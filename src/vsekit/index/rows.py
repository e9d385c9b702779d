"""How an index stores its embedding rows on disk: ``f32`` or ``int8``.

``f32`` (the default): ``emb-<gen>.f32``, ``dim`` float32 values a row, memory-mapped.
``int8`` (``vse index --storage int8``, for collections beyond RAM): ``emb-<gen>.i8``,
each row ``dim`` int8 values ``q`` and then one float32 scale ``s`` (``dim + 4`` bytes),
the row being ``q * s``: symmetric per-row quantisation with ``s = max|x| / 127``, a
quarter of the float32 size (2,052 bytes a photo of the default model instead of 8,192).
Re-ranking, exact search and everything else read both through the same array
interface (:class:`Int8Rows` gives float32 rows when indexed), so the rest of the index
does not know which it has.
"""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np

from vsekit.fsio import RowFile

STORAGES = ("f32", "int8")
_SUFFIX = {"f32": "f32", "int8": "i8"}


def check_storage(storage: str) -> str:
    if storage not in STORAGES:
        raise ValueError(f"storage: use {' | '.join(STORAGES)}, not {storage!r}")
    return storage


def emb_path(index: Path, generation: int, storage: str = "f32") -> Path:
    """The embeddings file of a generation: ``emb-<gen>.f32`` or ``emb-<gen>.i8``."""
    return index / f"emb-{generation}.{_SUFFIX[check_storage(storage)]}"


def row_bytes(dim: int, storage: str = "f32") -> int:
    return dim * 4 if check_storage(storage) == "f32" else dim + 4


def quantize_int8(block: np.ndarray) -> np.ndarray:
    """``[n, dim]`` float32 -> ``[n, dim + 4]`` uint8: each row's int8 values
    ``round(x / s)`` with ``s = max|x| / 127`` (1 for an all-zero row), then ``s``'s bytes."""
    x = np.ascontiguousarray(block, np.float32)
    scale = np.abs(x).max(axis=1, keepdims=True) / 127.0
    scale[scale == 0] = 1.0
    q = np.clip(np.rint(x / scale), -127, 127).astype(np.int8)
    out = np.empty((len(x), x.shape[1] + 4), np.uint8)
    out[:, :-4] = q.view(np.uint8)
    out[:, -4:] = scale.astype(np.float32).view(np.uint8).reshape(len(x), 4)
    return out


class Int8Rows:
    """Read-only ``[n, dim]`` float32 view of an ``int8`` rows file (or of the bytes
    :func:`quantize_int8` made): indexing with an int, a slice or an array of rows
    dequantises just those rows, so a memory-mapped file of any size is read in pieces."""

    dtype = np.dtype(np.float32)
    ndim = 2

    def __init__(self, raw: np.ndarray, dim: int) -> None:
        self.raw = raw
        self.dim = int(dim)
        self.shape = (len(raw), self.dim)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, idx) -> np.ndarray:
        raw = self.raw[idx]
        q = raw[..., : self.dim].view(np.int8).astype(np.float32)
        s = np.ascontiguousarray(raw[..., self.dim :]).view(np.float32)
        return q * s

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        a = self[:]
        return a if dtype is None else a.astype(dtype)


def open_rows(path: Path, n_rows: int, dim: int, storage: str = "f32"):
    """The first ``n_rows`` rows of the file at ``path``, memory-mapped (read-only):
    a float32 memmap, or :class:`Int8Rows` over one."""
    if not n_rows:
        return np.zeros((0, dim), np.float32)
    if check_storage(storage) == "f32":
        return np.memmap(path, np.float32, mode="r", shape=(n_rows, dim))
    return Int8Rows(np.memmap(path, np.uint8, mode="r", shape=(n_rows, dim + 4)), dim)


class ScatteredRows:
    """Rows ``[n, dim]`` (float32) read a few hundred at a time from scattered places in
    a large file, as re-ranking reads them: a second read-only mapping of the file,
    advised ``MADV_RANDOM`` (a page fault reads the pages a row lies on, not the
    kernel's 128 KiB readahead window around it, 64 int8 rows of 2,048 dims for the one
    asked for), and, before an array of rows is read, ``MADV_WILLNEED`` on each of them,
    so that the disk reads they need are issued together instead of one fault at a time.
    Indexing gives what the ordinary mapping gives (float32 rows)."""

    dtype = np.dtype(np.float32)
    ndim = 2

    def __init__(self, path: Path, n_rows: int, dim: int, storage: str = "f32") -> None:
        self.dim, self.storage = int(dim), check_storage(storage)
        self.row_bytes = row_bytes(self.dim, self.storage)
        with open(path, "rb") as fh:
            self._mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        self._mm.madvise(mmap.MADV_RANDOM)
        raw = np.frombuffer(self._mm, np.uint8, count=n_rows * self.row_bytes)
        raw = raw.reshape(n_rows, self.row_bytes)
        self._rows = Int8Rows(raw, self.dim) if self.storage == "int8" else raw.view(np.float32)
        self.shape = (n_rows, self.dim)

    def __len__(self) -> int:
        return self.shape[0]

    def prefetch(self, rows: np.ndarray) -> None:
        """Ask the kernel to read rows ``rows`` now, all at once (asynchronously)."""
        page = mmap.PAGESIZE
        for r in np.unique(np.asarray(rows, np.int64)):
            a = int(r) * self.row_bytes
            start = a - a % page
            self._mm.madvise(mmap.MADV_WILLNEED, start, a + self.row_bytes - start)

    def __getitem__(self, idx) -> np.ndarray:
        if isinstance(idx, np.ndarray) and idx.ndim == 1 and idx.dtype.kind in "iu":
            self.prefetch(idx)
        return np.asarray(self._rows[idx], np.float32)


def for_scattered_reads(emb):
    """:class:`ScatteredRows` over the file behind ``emb`` (a float32 memmap, or
    :class:`Int8Rows` over one); anything else is returned as it is."""
    raw = emb.raw if isinstance(emb, Int8Rows) else emb
    if not isinstance(raw, np.memmap) or raw.filename is None or raw.offset:
        return emb
    storage = "int8" if isinstance(emb, Int8Rows) else "f32"
    return ScatteredRows(Path(raw.filename), len(raw), emb.shape[1], storage)


class Int8RowFile(RowFile):
    """:class:`vsekit.fsio.RowFile` (the same crash-safe protocol) storing int8 rows."""

    def __init__(self, path, dim: int) -> None:
        super().__init__(path, dim)
        self.row_bytes = row_bytes(self.dim, "int8")

    def encode(self, block) -> bytes:
        return quantize_int8(block).tobytes()


def row_file(path: Path, dim: int, storage: str = "f32") -> RowFile:
    return RowFile(path, dim) if check_storage(storage) == "f32" else Int8RowFile(path, dim)


def copy_rows(src: Path, n_rows: int, dim: int, storage: str, rows: list[int], dst: RowFile,
              block: int = 65_536) -> list[bytes]:  # fmt: skip
    """Write ``src``'s ``rows`` (in that order) as ``dst``'s whole content, synced;
    returns the bytes written, block by block."""
    old = open_rows(src, n_rows, dim, storage)
    dst.truncate(0)
    written = []
    for a in range(0, len(rows), block):
        written.append(dst.append(np.asarray(old[rows[a : a + block]])))
    dst.sync()
    return written
