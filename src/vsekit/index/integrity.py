"""The index's integrity, mixed into :class:`vsekit.index.store.IndexStore`: that the
embeddings file holds every committed row, finite and unshared (:meth:`Integrity.check`,
at every open), and dropping what it does not hold so that the next update re-embeds it
(:meth:`Integrity.repair`, ``vse index --repair``)."""

from __future__ import annotations

from vsekit.index.files import drop_caches
from vsekit.index.rows import emb_path, nonfinite_rows, row_bytes
from vsekit.index.schema import ALL_ROWS, CollectionError, set_meta

SCAN_AT_OPEN = 1 << 30  # bytes of rows read through at each open for damage


class Integrity:
    """Checks and repair over the store's attributes (``path``, ``dim``, ``storage``,
    ``db_path``) and methods (``meta``, ``writer``, ``rows_file``, ``_query``,
    ``_all_rows``, ``reopen_if_replaced``)."""

    def check(self) -> None:
        """CollectionError naming the file and the repair command if the embeddings file
        does not hold every committed row, holds rows that are not finite numbers (up to
        :data:`SCAN_AT_OPEN` bytes; larger files are not read through at each open) or
        two files share a row. A rebuild swapped in meanwhile is checked instead."""
        try:
            self._check()
        except CollectionError:
            if not self.reopen_if_replaced():
                raise
            self._check()

    def _check(self) -> None:
        meta = self.meta()
        gen, n_rows = int(meta["generation"]), int(meta["rows"])
        f = emb_path(self.path, gen, self.storage)
        repair = f"run `vse index FOLDER --index {self.path} --repair` to re-embed what is missing"
        size = f.stat().st_size if f.is_file() else None
        if n_rows and size is None:
            raise CollectionError(f"{f}: missing, the index has {n_rows} embeddings; {repair}")
        if size is not None and size < n_rows * row_bytes(self.dim, self.storage):
            raise CollectionError(
                f"{f}: truncated ({size} bytes for {n_rows} rows of {self.dim}); {repair}"
            )
        bad = self.nonfinite_rows(gen, n_rows)
        if bad:  # only rows still in use matter (repair leaves dropped ones behind)
            listed = ",".join(str(r) for r in bad)
            bad = self._query(f"SELECT row FROM ({self._all_rows()}) WHERE row IN ({listed})")
        if bad:
            raise CollectionError(
                f"{f}: {len(bad)} embeddings are not finite numbers (the file is damaged); {repair}"
            )
        n, distinct, top = self._query(
            "SELECT COUNT(*), COUNT(DISTINCT row), COALESCE(MAX(row), -1) "
            f"FROM ({self._all_rows()})"
        )[0]
        if n != distinct or top >= n_rows:
            raise CollectionError(
                f"{self.db_path}: {n - distinct} files share an embedding row and "
                f"{top >= n_rows and 'some point past the last row' or 'none past it'}; {repair}"
            )

    def nonfinite_rows(self, gen: int, n_rows: int) -> list[int]:
        """The committed rows of ``emb-<gen>`` holding a NaN or an infinity (rows are
        refused before they are written, so these are damage); files over
        :data:`SCAN_AT_OPEN` bytes are not read through at each open."""
        f = emb_path(self.path, gen, self.storage)
        if n_rows * row_bytes(self.dim, self.storage) > SCAN_AT_OPEN:
            return []  # 130,000 photos of 2,048 float32 dimensions and more: not at every open
        return nonfinite_rows(f, n_rows, self.dim, self.storage)

    def repair(self) -> int:
        """Drop what the embeddings file does not hold (rows past its end, rows shared by
        two files, rows damaged into NaN or infinity) so that the next update re-embeds
        exactly those files; returns how many files were dropped."""
        with self.writer() as w:
            meta = dict(w.execute("SELECT key, value FROM meta").fetchall())
            gen, n_rows = int(meta["generation"]), int(meta["rows"])
            rows = self.rows_file(gen)
            keep = min(n_rows, rows.rows_on_disk())
            # the whole file, whatever its size: a repair is asked for, not run at each open
            emb = emb_path(self.path, gen, self.storage)
            damaged = ",".join(map(str, nonfinite_rows(emb, keep, self.dim, self.storage)))
            damaged = damaged or "-1"
            with w:
                bad_rows = f"""SELECT row FROM ({ALL_ROWS}) GROUP BY row
                               HAVING COUNT(*) > 1 OR row >= {int(keep)}
                                   OR row IN ({damaged})"""
                bad = w.execute(
                    f"""SELECT id FROM files WHERE row IN ({bad_rows}) UNION
                        SELECT file_id FROM segments WHERE row IN ({bad_rows})"""
                ).fetchall()
                n0 = w.execute("SELECT COUNT(*) FROM files").fetchone()[0]
                w.executemany("DELETE FROM segments WHERE file_id = ?", bad)
                w.executemany("DELETE FROM files WHERE id = ?", bad)
                set_meta(w, rows=keep)
                drop_caches(w, self.path)  # derived from rows that may have changed
                dropped = n0 - w.execute("SELECT COUNT(*) FROM files").fetchone()[0]
            rows.truncate(keep)
            return dropped
