"""Atomic file writes: the one way vsekit replaces a file or a directory.

A reader never sees a half-written file: the content goes to a temporary name in the
same directory, is flushed and ``fsync``'ed, renamed over the target (atomic on POSIX),
and the directory is ``fsync``'ed so that the rename itself survives a power cut.

* :func:`atomic_write` - bytes, text, or a writer callback ``fn(tmp_path)`` for libraries
  that write files by name (safetensors, FAISS, gzip);
* :func:`atomic_dir` - a context manager that builds a whole directory beside the target
  and swaps it in at the end (model bundles, checkpoints); on an exception nothing of it
  remains.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path


class LockBusy(RuntimeError):
    """Another process holds the lock (:func:`exclusive_lock` without ``wait``)."""


@contextlib.contextmanager
def exclusive_lock(path: str | os.PathLike, wait: str | None = None) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if missing): one writer at a
    time across processes. When another process holds it: with ``wait``, print that
    message to stderr and block until it is free; without, raise :class:`LockBusy`."""
    import fcntl
    import sys

    with open(path, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if wait is None:
                raise LockBusy(str(path)) from None
            print(wait, file=sys.stderr)
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def open_no_wait(path: str | os.PathLike) -> tuple[int, os.stat_result]:
    """``(fd, fstat)`` of ``path`` opened read-only without blocking (a FIFO opens at once
    and is told apart by its stat, checked on the open file, not on the name)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    return fd, os.fstat(fd)


def file_sha256(path: str | os.PathLike) -> str:
    """The hex sha256 of a file's content, read in blocks."""
    import hashlib

    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def cache_dir() -> Path:
    """vsekit's cache: ``$VSEKIT_CACHE``, default ``~/.cache/vsekit`` (weights, stores,
    the default index, parses)."""
    return Path(os.environ.get("VSEKIT_CACHE", Path.home() / ".cache" / "vsekit"))


def fsync_dir(path: str | os.PathLike) -> None:
    """``fsync`` a directory (makes a rename inside it durable); a no-op where the
    platform cannot open directories."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_file(path: str | os.PathLike) -> None:
    with open(path, "rb+") as fh:
        os.fsync(fh.fileno())


def np_bytes(array) -> bytes:
    """``array`` in NumPy's ``.npy`` format, for :func:`atomic_write`."""
    import io

    import numpy as np

    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def _tmp_name(path: Path, directory: bool = False) -> Path:
    """A new, unique name beside ``path`` (created, so that no other thread or process
    can take it): concurrent writers of one file never share a temporary file."""
    make = tempfile.mkdtemp if directory else tempfile.mkstemp
    out = make(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    if not directory:
        os.close(out[0])
        out = out[1]
    return Path(out)


#: what atomically written files end as: readable by all, as an ordinary file would be
#: (some writers, safetensors among them, create 0600 files, which a wheel then ships and
#: a system-wide install cannot be read by other users)
FILE_MODE = 0o644
DIR_MODE = 0o755


def atomic_write(
    path: str | os.PathLike,
    data: bytes | str | Callable[[Path], object],
    *,
    encoding: str = "utf-8",
) -> Path:
    """Replace ``path`` with ``data`` atomically (temp file, fsync, rename, fsync dir).

    ``data`` is bytes, text (encoded with ``encoding``) or a callable that writes the
    temporary file it is given. Parent directories are created. Returns ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_name(path)
    try:
        if callable(data):
            data(tmp)
            fsync_file(tmp)
        else:
            raw = data.encode(encoding) if isinstance(data, str) else bytes(data)
            with open(tmp, "wb") as fh:
                fh.write(raw)
                fh.flush()
                os.fsync(fh.fileno())
        os.chmod(tmp, FILE_MODE)  # temporary files (and safetensors' own) are 0600
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(e, OSError) and e.filename is None:  # a failed write (disk full)
            raise OSError(e.errno, e.strerror, str(path)) from e
        raise
    fsync_dir(path.parent)
    return path


@contextlib.contextmanager
def _locked_dir(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on the directory itself (threads and processes)."""
    import fcntl

    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """``with atomic_dir(out) as tmp: ...write files into tmp...`` then ``out`` is
    replaced by ``tmp``: an old ``out`` is renamed aside, ``tmp`` renamed to ``out``, the
    old one removed. Two renames: a kill between them leaves no ``out`` but the old one,
    whole, under a hidden temporary name beside it (``.out.*.tmp``); a reader never sees
    a half-written folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_name(path, directory=True)
    try:
        yield tmp
        os.chmod(tmp, DIR_MODE)  # a temporary folder is 0700
        for f in tmp.rglob("*"):
            if f.is_file():
                os.chmod(f, FILE_MODE)
                fsync_file(f)
            elif f.is_dir():
                os.chmod(f, DIR_MODE)
        fsync_dir(tmp)
        old = None
        with _locked_dir(path.parent):  # one swap at a time: move aside, then move in
            if path.exists():
                old = _tmp_name(path, directory=True)
                os.replace(path, old)  # over the new empty folder: a rename may replace one
            os.replace(tmp, path)
        fsync_dir(path.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def stored_ns(ns: int) -> int:
    """A modification time in nanoseconds as the index stores and compares it: itself
    within SQLite's INTEGER (to 2262-04-11), else wrapped into that range, so that one
    file's time past it (a camera's clock, an archive) never stops a batch, and two
    different such times still differ (any two within 584 years of each other)."""
    return ((int(ns) + (1 << 63)) % (1 << 64)) - (1 << 63)


class RowFile:
    """A crash-safe, append-only file of float32 rows of ``dim`` columns: the one row
    store of the index's embeddings and the lab's feature stores.

    The protocol: :meth:`truncate` to the committed row count (dropping the bytes of an
    interrupted batch), :meth:`append` rows, :meth:`sync` (fsync), and only then commit
    the new count wherever the owner keeps it (SQLite, a progress file). Committed rows
    therefore always exist on disk; rows past the count are never read.
    """

    def __init__(self, path: str | os.PathLike, dim: int) -> None:
        self.path = Path(path)
        self.dim = int(dim)
        self.row_bytes = self.dim * 4  # a subclass storing rows otherwise changes both
        self._fh = None

    def encode(self, block) -> bytes:
        """The bytes of ``block`` (``[n, dim]`` float32) as the file stores them."""
        return block.tobytes()

    def rows_on_disk(self) -> int:
        """Whole rows the file holds (0 when it does not exist)."""
        try:
            return self.path.stat().st_size // self.row_bytes
        except FileNotFoundError:
            return 0

    @contextlib.contextmanager
    def _named(self) -> Iterator[None]:
        """OSErrors of reads and writes (disk full) name this file."""
        try:
            yield
        except OSError as e:
            if e.filename is None:
                raise OSError(e.errno, e.strerror, str(self.path)) from e
            raise

    def truncate(self, rows: int) -> None:
        """Cut (or create) the file at ``rows`` rows and fsync it (and, for a new file,
        its folder, so that the file survives a power cut before it is committed)."""
        new = not self.path.exists()
        with self._named(), open(self.path, "ab") as fh:
            fh.truncate(int(rows) * self.row_bytes)
            os.fsync(fh.fileno())
        if new:
            fsync_dir(self.path.parent)

    def append(self, block) -> bytes:
        """Append ``block`` (``[n, dim]``) at the end of the file (not yet fsync'ed);
        returns the bytes written (for the index's row checksums)."""
        import numpy as np

        block = np.ascontiguousarray(block, np.float32)
        if block.ndim != 2 or block.shape[1] != self.dim:
            raise ValueError(f"{self.path}: rows of shape {block.shape}, expected (n, {self.dim})")
        with self._named():
            if self._fh is None:
                self._fh = open(self.path, "ab")  # noqa: SIM115  (closed by sync)
            data = self.encode(block)
            self._fh.write(data)
        return data

    def sync(self) -> None:
        """Flush and fsync what was appended, and close the file."""
        if self._fh is not None:
            fh, self._fh = self._fh, None
            with self._named():
                try:
                    fh.flush()
                    os.fsync(fh.fileno())
                finally:
                    with contextlib.suppress(OSError):
                        fh.close()
