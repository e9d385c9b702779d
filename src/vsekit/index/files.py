"""The files of an index folder: their names, which of them the index derived and may
delete (nothing else in the folder is touched), and cleaning up after a killed writer or
rebuild. No SQLite schema and no store here (:mod:`vsekit.index.schema`,
:mod:`vsekit.index.store`)."""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path

DB_NAME = "index.sqlite"
LOCK_NAME = "index.lock"
#: the database a rebuild fills beside the live one, renamed over it when complete
REBUILD_NAME = DB_NAME + ".rebuild"


def file_identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


#: the names of the index's own derived files (nothing else in its folder is touched)
DERIVED = re.compile(
    r"^(?:emb-(\d+)\.(?:f32|i8)|pen-(\d+)-[0-9a-f]+\.f32|faiss-(\d+)-\d+-\d+\.index)$"
)


def generation_of(name: str) -> int:
    """``emb-3.f32``, ``pen-3-<key>.f32``, ``faiss-3-<rows>-<live>.index`` -> 3; -1 for
    any other name."""
    m = DERIVED.match(name)
    return int(next(g for g in m.groups() if g is not None)) if m else -1


def derived_files(index: Path) -> list[Path]:
    """The index's embeddings and caches, by their exact names only."""
    return [f for f in index.iterdir() if DERIVED.match(f.name)] if index.is_dir() else []


def remove_rebuild(index: Path, generation: int | None = None) -> None:
    """Remove what an unfinished rebuild wrote (its database, its journal and, given
    its generation, its embeddings and caches)."""
    for name in (REBUILD_NAME, REBUILD_NAME + "-journal", REBUILD_NAME + "-wal",
                 REBUILD_NAME + "-shm"):  # fmt: skip
        (index / name).unlink(missing_ok=True)
    if generation is not None:
        for f in derived_files(index):
            if generation_of(f.name) == generation:
                f.unlink(missing_ok=True)


def roll_back(db_path: Path) -> None:
    """Let SQLite roll back a hot journal of ``db_path`` (the caller holds the lock); a
    damaged or foreign database is left as it is (a rebuild replaces it anyway)."""
    if not db_path.is_file():
        return
    try:
        db = sqlite3.connect(db_path, timeout=30)
        try:
            db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        finally:
            db.close()
    except sqlite3.DatabaseError:
        pass


def drop_caches(w: sqlite3.Connection, index: Path) -> None:
    """Forget every derived cache (their records, then their files)."""
    w.execute("DELETE FROM meta WHERE key LIKE 'cache:%'")
    for f in [*index.glob("pen-*.f32"), *index.glob("faiss-*.index")]:
        f.unlink(missing_ok=True)
