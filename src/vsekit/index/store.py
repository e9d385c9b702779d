"""The index on disk: SQLite metadata plus an append-only, crash-safe embeddings file.

Layout of an index directory::

    index.sqlite      meta (model, dim, generation, committed rows, caches), files,
                      segments, failed
    emb-<gen>.f32     float32 rows of ``dim`` columns, append-only within a generation
    pen-<gen>-<key>.f32, faiss-<gen>-<rows>-<live>.index
                      derived caches, written only by a writer, verified on read

Crash safety (a ``kill -9`` at any moment leaves a usable index): rows are appended with
:class:`vsekit.fsio.RowFile` and fsync'ed *before* the SQLite transaction that makes them
reachable (files rows + ``meta.rows``) commits; compaction writes ``emb-<gen+1>.f32`` in
full, then switches generation in one transaction.

One writer at a time: everything that changes the index (:meth:`IndexStore.writer`)
holds an exclusive lock on ``index.lock``. Readers take a :class:`~vsekit.index.snapshot.
Snapshot` through a read-only connection and write nothing: SQLite runs with a rollback
journal, which, unlike WAL, lets a reader open the database without creating files.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from vsekit.fsio import RowFile, exclusive_lock
from vsekit.index.checksums import encoded_crcs, record_blocks
from vsekit.index.files import (
    DB_NAME,
    LOCK_NAME,
    derived_files,
    file_identity,
    generation_of,
    remove_rebuild,
)
from vsekit.index.integrity import Integrity
from vsekit.index.rows import (
    check_storage,
    copy_rows,
    emb_path,
    row_file,
)
from vsekit.index.schema import (
    ALL_ROWS,
    INDEX_VERSION,
    SCHEMA,
    CollectionError,
    DamagedIndex,
    check_model,
    decode_text,
    set_meta,
)
from vsekit.index.snapshot import Snapshot, read_snapshot


class IndexStore(Integrity):
    """Open (or, given ``model_info``, create) the index at ``path``.

    ``model_info``: ``{"name", "fingerprint", "dim", "similarity"}`` of the model the
    embeddings come from; required to create an index, checked when given on open.
    """

    def __init__(
        self,
        path: str | Path,
        model_info: dict | None = None,
        *,
        db_name: str = DB_NAME,
        lock_held: bool = False,
        generation: int = 0,
    ) -> None:
        self.path = Path(path).expanduser()
        if self.path.exists() and not self.path.is_dir():
            raise CollectionError(f"{self.path}: is a file, not an index folder")
        self.db_path = self.path / db_name
        self._w: sqlite3.Connection | None = None
        self._read_lock = threading.RLock()
        self._lock_held = lock_held  # a rebuild's store: its caller holds the lock
        self._model_info = model_info
        #: a rebuild replaced the database while :meth:`writer` waited for the lock
        self.replaced_at_lock = False
        if not self.db_path.is_file():
            if model_info is None:
                raise CollectionError(f"{self.path}: no index here (run `vse index DIR` first)")
            self.path.mkdir(parents=True, exist_ok=True)
            self._create(model_info, generation)
        self.read_only = not os.access(self.path, os.W_OK) or not os.access(self.db_path, os.W_OK)
        if not self.read_only:
            self._recover()
        self._open()

    def _open(self) -> None:
        """Open the read-only connection and read the model's meta (again after a
        rebuild replaced the database)."""
        rebuild = (
            f"rebuild it with `vse index FOLDER --index {self.path} --rebuild` (your "
            "photos are untouched; only the index is made again)"
        )
        inode = file_identity(self.db_path)
        try:
            self.db = self._reader()
            meta = self.meta()
            missing = {"version", "model", "fingerprint", "dim", "generation", "rows"} - set(meta)
            if missing and not meta:
                raise CollectionError(
                    f"{self.db_path}: an empty or foreign index database; {rebuild}"
                )
            if missing:
                raise CollectionError(
                    f"{self.db_path}: not a vsekit index (no {sorted(missing)}); {rebuild}"
                )
        except sqlite3.DatabaseError as e:
            raise CollectionError(
                f"{self.db_path}: damaged or not an index database ({e}); {rebuild}"
            ) from e
        if int(meta.get("version", -1)) != INDEX_VERSION:
            raise CollectionError(
                f"{self.db_path}: index version {meta.get('version')} is not supported; {rebuild}"
            )
        if self._model_info is not None:
            check_model(self.path, meta, self._model_info)
        self.dim = int(meta["dim"])
        self.model_name = meta["model"]
        self.fingerprint = meta["fingerprint"]
        self.similarity = meta.get("similarity", "cosine")
        self.storage = meta.get("storage", "f32")  # how rows are stored (index/rows.py)
        self._inode = inode  # only once the database is accepted

    # -- connections ---------------------------------------------------------------
    def _reader(self) -> sqlite3.Connection:
        """A read-only connection: it creates no file (immutable where the folder or
        the database cannot be written, so nothing can change under it)."""
        mode = "ro&immutable=1" if self.read_only else "ro"
        db = sqlite3.connect(f"file:{self.db_path}?mode={mode}", uri=True,
                             timeout=30, check_same_thread=False)  # fmt: skip
        db.text_factory = decode_text
        return db

    def _needs_recovery(self) -> bool:
        """The database is in WAL mode (an index made before the rollback journal: its
        header's read/write versions are 2) or a killed writer left a hot journal."""
        try:
            with open(self.db_path, "rb") as fh:
                header = fh.read(20)
        except OSError:
            return False
        wal = len(header) == 20 and (header[18] == 2 or header[19] == 2)
        journal = self.db_path.with_name(DB_NAME + "-journal")
        hot = journal.is_file() and journal.stat().st_size > 0
        return wal or hot or self.db_path.with_name(DB_NAME + "-wal").exists()

    def _recover(self) -> None:
        """Before any read-only connection: under the writer lock, let a read-write
        connection roll back a hot journal (a writer killed mid-commit) and turn a WAL
        index into a rollback-journal one, so that readers never need to write."""
        if not self._needs_recovery():
            return
        lock = (
            contextlib.nullcontext()
            if self._lock_held
            else exclusive_lock(self.path / LOCK_NAME, wait=f"{self.path}: waiting for the writer")
        )
        with lock:
            db = sqlite3.connect(self.db_path, timeout=30)
            try:
                db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()  # rolls back
                mode = db.execute("PRAGMA journal_mode=DELETE").fetchone()[0].lower()
            finally:
                db.close()
            if mode != "delete":
                raise CollectionError(f"{self.db_path}: cannot leave journal mode {mode}")

    def _writer_db(self) -> sqlite3.Connection:
        if self._w is None:
            w = sqlite3.connect(self.db_path, timeout=30, check_same_thread=False)
            w.text_factory = decode_text
            w.executescript(SCHEMA)
            cols = {r[1] for r in w.execute("PRAGMA table_info(photo_meta)")}
            if "sha256" not in cols:  # a table from before content hashes were kept
                w.execute("ALTER TABLE photo_meta ADD COLUMN sha256 TEXT")
                w.commit()
            if "phash" not in cols:  # from before perceptual hashes (index/phash.py)
                w.execute("ALTER TABLE photo_meta ADD COLUMN phash TEXT")
                w.commit()
            if "phash_crops" not in cols:  # from before crop hashes (index/phash.py)
                w.execute("ALTER TABLE photo_meta ADD COLUMN phash_crops TEXT")
                w.commit()
            self._w = w
        return self._w

    def _create(self, model_info: dict, generation: int) -> None:
        rebuild = (
            f"rebuild it with `vse index FOLDER --index {self.path} --rebuild` (your "
            "photos are untouched; only the index is made again)"
        )
        with self.writer(reopen=False) as w:
            if dict(w.execute("SELECT key, value FROM meta").fetchall()):
                return  # another process created it while this one waited
            if not self._lock_held and any(
                f.name.startswith("emb-") for f in derived_files(self.path)
            ):
                raise CollectionError(
                    f"{self.db_path}: an empty or foreign index database; {rebuild}"
                )
            with w:
                set_meta(w, version=INDEX_VERSION, model=model_info["name"],
                         fingerprint=model_info["fingerprint"], dim=int(model_info["dim"]),
                         similarity=model_info.get("similarity", "cosine"),
                         storage=check_storage(model_info.get("storage", "f32")),
                         precision=model_info.get("precision") or "",
                         generation=int(generation), rows=0)  # fmt: skip

    @contextlib.contextmanager
    def writer(self, reopen: bool = True) -> Iterator[sqlite3.Connection]:
        """The index's one-writer lock (blocks while another process holds it), and the
        read-write connection that only its holder uses. A rebuild that swapped in a new
        database while this one waited is seen here: the connections are reopened and
        the model checked again."""
        if getattr(self, "read_only", False):
            raise CollectionError(f"{self.path}: the index is read-only here; cannot update it")
        try:
            if self._lock_held:
                yield self._writer_db()
                return
            waiting = f"{self.path}: another process is updating this index; waiting"
            with exclusive_lock(self.path / LOCK_NAME, wait=waiting):
                self.replaced_at_lock = reopen and self.reopen_if_replaced()
                yield self._writer_db()
        except sqlite3.OperationalError as e:  # disk full, I/O error: one line, the file
            raise CollectionError(f"{self.db_path}: {e}; nothing past the last commit "
                                  "was kept") from e  # fmt: skip

    def reopen_if_replaced(self) -> bool:
        """Reopen the connections if a rebuild has renamed a new database over the one
        they read (a connection keeps reading the file it opened); True if it did."""
        if file_identity(self.db_path) in (self._inode, None):
            return False
        with self._read_lock:
            if file_identity(self.db_path) in (self._inode, None):
                return False  # another thread reopened them
            # the model in use: the one given, else the one the index had when opened
            # (a process holding a model must never read or add another's embeddings)
            if self._model_info is None:
                self._model_info = {"name": self.model_name, "fingerprint": self.fingerprint}
            self.close()
            try:
                self._open()
            except CollectionError:
                self.db = self._reader()  # stay usable for closing; every call raises again
                raise
        return True

    def set_ann_budget(self, max_ram: int) -> None:
        """Record the RAM budget of the index's ANN structure (``vse index --max-ram``):
        later updates and searches size it from this (:func:`vsekit.index.ann.choose_spec`)."""
        with self.writer() as w, w:
            set_meta(w, ann_max_ram=int(max_ram))

    def close(self) -> None:
        for c in (getattr(self, "db", None), self._w):
            if c is not None:
                c.close()
        self._w = None

    # -- reading -------------------------------------------------------------------
    def meta(self) -> dict[str, str]:
        with self._read_lock:
            return dict(self.db.execute("SELECT key, value FROM meta").fetchall())

    def data_version(self) -> tuple[int, int]:
        """Changes whenever another connection (a writer) commits, or a rebuild replaces
        the database."""
        self.reopen_if_replaced()
        with self._read_lock:
            return self._inode, self.db.execute("PRAGMA data_version").fetchone()[0]

    def snapshot(self) -> Snapshot:
        """One consistent state. A rebuild may rename its database over this one and
        delete the old embeddings between a reader's checks: then the snapshot is taken
        again from the new database, never returned without its rows."""
        with self._read_lock:
            snap = read_snapshot(self.db, self.path, self.dim)
            if snap.n_rows and len(snap.emb) == 0 and self.reopen_if_replaced():
                snap = read_snapshot(self.db, self.path, self.dim)
            return snap

    def failures(self) -> list[tuple[str, str]]:
        with self._read_lock:
            return self.db.execute("SELECT path, error FROM failed ORDER BY path").fetchall()

    def roots(self, snap: Snapshot | None = None) -> list[str]:
        """The folders this index was built from (resolved); files are served only from
        inside them. Indexes from before roots were recorded use each file's folder."""
        raw = self.meta().get("roots")
        if raw is not None:
            return json.loads(raw)
        paths = (
            snap.paths
            if snap is not None
            else [p for (p,) in self._query("SELECT path FROM files")]
        )
        return sorted({os.path.realpath(os.path.dirname(p)) for p in paths})

    def _query(self, sql: str) -> list[tuple]:
        with self._read_lock:
            return self.db.execute(sql).fetchall()

    def _all_rows(self) -> str:
        has = self._query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'segments'")
        return ALL_ROWS if has else "SELECT row FROM files"

    # -- writing (callers hold :meth:`writer`) --------------------------------------
    def rows_file(self, gen: int) -> RowFile:
        return row_file(emb_path(self.path, gen, self.storage), self.dim, self.storage)

    def add_root(self, w: sqlite3.Connection, root: Path) -> None:
        raw = dict(w.execute("SELECT key, value FROM meta").fetchall()).get("roots")
        roots = set(json.loads(raw)) if raw else set()
        real = os.path.realpath(root)
        if real not in roots:
            with w:
                set_meta(w, roots=json.dumps(sorted(roots | {real})))

    def compact(self, w: sqlite3.Connection, min_garbage: int = 1024) -> bool:
        """Rewrite the embeddings without dead rows when they outnumber the live ones
        (and are at least ``min_garbage``); also removes stray files. True if rewritten."""
        meta = dict(w.execute("SELECT key, value FROM meta").fetchall())
        gen, n_rows = int(meta["generation"]), int(meta["rows"])
        if not self._lock_held:  # a rebuild's store leaves the live index's files alone
            remove_rebuild(self.path)  # what a killed rebuild left
            for stray in derived_files(self.path):  # earlier generations' files
                if generation_of(stray.name) != gen:
                    stray.unlink(missing_ok=True)
        live = w.execute(
            "SELECT 'f', id, row FROM files UNION ALL SELECT 's', rowid, row FROM segments"
        ).fetchall()
        garbage = n_rows - len(live)
        if garbage < max(min_garbage, len(live)):
            return False
        old = emb_path(self.path, gen, self.storage)
        keep = np.asarray([r for _, _, r in live], np.int64)
        if len(self.damaged_rows(gen, n_rows, keep, db=w)):  # never carry damage forward
            raise DamagedIndex(f"{old}: embeddings are damaged; {self._repair_hint()}")
        new_file = self.rows_file(gen + 1)
        written = copy_rows(old, n_rows, self.dim, self.storage, keep.tolist(), new_file)
        crcs = [encoded_crcs(b, new_file.row_bytes) for b in written]
        with w:
            record_blocks(w, np.concatenate(crcs) if crcs else np.zeros(0, np.uint32), gen + 1)
            new_rows = [(t, j, i) for j, (t, i, _) in enumerate(live)]
            w.executemany(
                "UPDATE files SET row = ? WHERE id = ?",
                [(j, i) for t, j, i in new_rows if t == "f"],
            )
            w.executemany(
                "UPDATE segments SET row = ? WHERE rowid = ?",
                [(j, i) for t, j, i in new_rows if t == "s"],
            )
            set_meta(w, generation=gen + 1, rows=len(live))
        emb_path(self.path, gen, self.storage).unlink(missing_ok=True)
        return True


def storage_of(path: str | Path) -> str | None:
    """How the index at ``path`` stores its rows (``f32``/``int8``), None if none is there."""
    if not (Path(path).expanduser() / DB_NAME).is_file():
        return None
    store = IndexStore(path)
    try:
        return store.storage
    finally:
        store.close()
