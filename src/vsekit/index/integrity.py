"""The index's integrity, mixed into :class:`vsekit.index.store.IndexStore`: that the
embeddings file holds every committed row, unchanged since it was written (its checksum,
:mod:`vsekit.index.checksums`) and unshared (:meth:`Integrity.check`, at every open), and
dropping what it does not hold so that the next update re-embeds it
(:meth:`Integrity.repair`, ``vse index --repair``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vsekit.index.checksums import (
    backfill,
    bad_rows,
    forget_from,
    read_sums,
    restart,
    sums_valid,
)
from vsekit.index.files import drop_caches
from vsekit.index.rows import emb_path, open_rows, row_bytes
from vsekit.index.schema import ALL_ROWS, CollectionError, DamagedIndex, set_meta

SCAN_AT_OPEN = 1 << 30  # bytes of rows read through at each open for damage


@dataclass
class _CheckState:
    """What :meth:`Integrity.check` reads in its transaction: the embeddings file, the
    committed row count, the file's size (None: missing), the rows in use below that
    count with their checksums and the file's mapping (None: not scanned at this size),
    and ``(files, distinct rows, highest row)``."""

    path: Path
    n_rows: int
    size: int | None
    used: np.ndarray | None = None
    crc: np.ndarray | None = None
    known: np.ndarray | None = None
    emb: object = None
    counts: tuple[int, int, int] = (0, 0, -1)


class Integrity:
    """Checks and repair over the store's attributes (``path``, ``dim``, ``storage``,
    ``similarity``, ``db_path``) and methods (``meta``, ``writer``, ``rows_file``,
    ``_query``, ``_all_rows``, ``reopen_if_replaced``)."""

    def check(self) -> None:
        """CollectionError naming the file and the repair command if the embeddings file
        does not hold every committed row, holds rows that changed since they were
        written (up to :data:`SCAN_AT_OPEN` bytes; larger files are not read through at
        each open) or two files share a row. What it reads from the database, and the
        file's mapping, come from one read transaction (:meth:`_read_for_check`); the
        rows are scanned after it. A rebuild swapped in meanwhile is checked instead."""
        try:
            self._check()
        except CollectionError:
            if not self.reopen_if_replaced():
                raise
            self._check()

    def _repair_hint(self) -> str:
        return f"run `vse index FOLDER --index {self.path} --repair` to re-embed what is damaged"

    def _read_for_check(self) -> _CheckState:
        """The database's side of :meth:`check`, in one read transaction: a writer
        committing between separate reads would show rows past the ``rows`` read first (a
        false alarm); its commit waits for these reads only (its busy timeout), as for a
        snapshot. The embeddings file is mapped inside the transaction, so a compaction
        committed afterwards cannot take it away from the scan."""
        with self._read_lock:
            self.db.execute("BEGIN")
            try:
                meta = self.meta()
                gen, n_rows = int(meta["generation"]), int(meta["rows"])
                f = emb_path(self.path, gen, self.storage)
                size = f.stat().st_size if f.is_file() else None
                st = _CheckState(f, n_rows, size)
                whole = size is not None and size >= n_rows * row_bytes(self.dim, self.storage)
                if n_rows and whole and n_rows * row_bytes(self.dim, self.storage) <= SCAN_AT_OPEN:
                    used = np.asarray([r for (r,) in self._query(self._all_rows())], np.int64)
                    st.used = used[used < n_rows]
                    st.crc, st.known = read_sums(self.db, n_rows, gen)
                    try:
                        st.emb = open_rows(f, n_rows, self.dim, self.storage)
                    except FileNotFoundError:  # removed since the stat (a rebuild)
                        st.size = None
                st.counts = self._query(
                    "SELECT COUNT(*), COUNT(DISTINCT row), COALESCE(MAX(row), -1) "
                    f"FROM ({self._all_rows()})"
                )[0]
            finally:
                if self.db.in_transaction:  # not after SQLite rolled back on its own
                    self.db.execute("COMMIT")
        return st

    def _check(self) -> None:
        st = self._read_for_check()
        f, n_rows, size = st.path, st.n_rows, st.size
        repair = self._repair_hint()
        if n_rows and size is None:
            raise CollectionError(f"{f}: missing, the index has {n_rows} embeddings; {repair}")
        if size is not None and size < n_rows * row_bytes(self.dim, self.storage):
            raise CollectionError(
                f"{f}: truncated ({size} bytes for {n_rows} rows of {self.dim}); {repair}"
            )
        if st.emb is not None:
            unit = self.similarity == "cosine"
            bad = bad_rows(st.emb, st.used, st.crc, st.known, unit, self.storage)
            if len(bad):
                raise DamagedIndex(
                    f"{f}: {len(bad)} embeddings changed since they were written (the file "
                    f"is damaged); {repair}"
                )
        n, distinct, top = st.counts
        if n != distinct or top >= n_rows:
            raise CollectionError(
                f"{self.db_path}: {n - distinct} files share an embedding row and "
                f"{top >= n_rows and 'some point past the last row' or 'none past it'}; {repair}"
            )

    def damaged_rows(self, gen: int, n_rows: int, rows: np.ndarray, db=None) -> np.ndarray:
        """The rows among ``rows`` of ``emb-<gen>`` (``n_rows`` committed) whose bytes no
        longer match their checksum (rows from before checksums: not finite, or not of
        unit norm in an index of unit rows)."""
        crc, known = read_sums(db if db is not None else self.db, n_rows, gen)
        emb = open_rows(emb_path(self.path, gen, self.storage), n_rows, self.dim, self.storage)
        unit = self.similarity == "cosine"
        return bad_rows(emb, rows, crc, known, unit, self.storage)

    def backfill_sums(self, w) -> int:
        """Give the rows in use that have no checksum (an index from before checksums)
        one, after checking them; CollectionError (run --repair) if one is damaged.
        The caller holds :meth:`writer` as ``w``; returns how many rows got one."""
        meta = dict(w.execute("SELECT key, value FROM meta").fetchall())
        gen, n_rows = int(meta["generation"]), int(meta["rows"])
        if not sums_valid(w, gen):  # none yet, or another generation's: start over
            with w:
                restart(w, gen)
        crc, known = read_sums(w, n_rows, gen)
        used = np.asarray([r for (r,) in w.execute(ALL_ROWS)], np.int64)
        used = used[used < n_rows]
        if not len(used) or known[used].all():
            return 0
        f = emb_path(self.path, gen, self.storage)
        emb = open_rows(f, n_rows, self.dim, self.storage)
        unit = self.similarity == "cosine"
        legacy = used[~known[used]]
        if len(bad_rows(emb, legacy, crc, known, unit, self.storage)):
            raise DamagedIndex(f"{f}: embeddings are damaged; {self._repair_hint()}")
        with w:
            return backfill(w, emb, legacy, known)

    def repair(self) -> int:
        """Drop what the embeddings file does not hold (rows past its end, rows shared by
        two files, rows that changed since they were written) so that the next update
        re-embeds exactly those files; returns how many files were dropped. The rows
        kept that had no checksum (an index from before checksums) get one."""
        with self.writer() as w:
            meta = dict(w.execute("SELECT key, value FROM meta").fetchall())
            gen, n_rows = int(meta["generation"]), int(meta["rows"])
            rows = self.rows_file(gen)
            keep = min(n_rows, rows.rows_on_disk())
            # the whole file, whatever its size: a repair is asked for, not run at each open
            used = np.asarray([r for (r,) in w.execute(ALL_ROWS)], np.int64)
            used = used[used < keep]
            damaged = ",".join(map(str, self.damaged_rows(gen, keep, used, db=w).tolist()))
            damaged = damaged or "-1"
            with w:
                bad_rows_sql = f"""SELECT row FROM ({ALL_ROWS}) GROUP BY row
                                   HAVING COUNT(*) > 1 OR row >= {int(keep)}
                                       OR row IN ({damaged})"""
                bad = w.execute(
                    f"""SELECT id FROM files WHERE row IN ({bad_rows_sql}) UNION
                        SELECT file_id FROM segments WHERE row IN ({bad_rows_sql})"""
                ).fetchall()
                n0 = w.execute("SELECT COUNT(*) FROM files").fetchone()[0]
                w.executemany("DELETE FROM segments WHERE file_id = ?", bad)
                w.executemany("DELETE FROM files WHERE id = ?", bad)
                set_meta(w, rows=keep)
                forget_from(w, keep)
                drop_caches(w, self.path)  # derived from rows that may have changed
                dropped = n0 - w.execute("SELECT COUNT(*) FROM files").fetchone()[0]
            rows.truncate(keep)
            self.backfill_sums(w)
            return dropped
