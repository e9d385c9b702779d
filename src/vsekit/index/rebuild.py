"""Rebuilding an index beside the live one, and swapping it in with one rename."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from vsekit.fsio import exclusive_lock, fsync_dir, fsync_file
from vsekit.index.files import (
    DB_NAME,
    LOCK_NAME,
    REBUILD_NAME,
    derived_files,
    generation_of,
    remove_rebuild,
    roll_back,
)
from vsekit.index.schema import CollectionError
from vsekit.index.store import IndexStore


@contextlib.contextmanager
def rebuilding(path: str | Path, model_info: dict) -> Iterator[IndexStore]:
    """Build a new index for ``model_info`` beside the one at ``path`` and swap it in.

    Under the writer lock for the whole build (a concurrent ``vse index`` waits, then
    sees the new index), the new database ``index.sqlite.rebuild`` is filled with rows of
    a generation no file of the old index uses; the caller fills it through the yielded
    store. On success it is renamed over ``index.sqlite`` (one atomic rename: a reader
    sees the old index or the new one, never neither) and the old index's files are
    removed. On any failure, a kill included, the old index stays as it was and the next
    rebuild removes the leftovers. Only the index's own files are ever deleted.
    """
    path = Path(path).expanduser()
    if path.exists() and not path.is_dir():
        raise CollectionError(f"{path}: is a file, not an index folder")
    path.mkdir(parents=True, exist_ok=True)
    waiting = f"{path}: another process is updating this index; waiting"
    with exclusive_lock(path / LOCK_NAME, wait=waiting):
        remove_rebuild(path)
        roll_back(path / DB_NAME)  # a killed writer's hot journal, before it can be lost
        gen = 1 + max((generation_of(f.name) for f in derived_files(path)), default=-1)
        store = IndexStore(path, model_info, db_name=REBUILD_NAME, lock_held=True,
                           generation=gen)  # fmt: skip
        try:
            yield store
            store.close()
            fsync_file(store.db_path)
        except BaseException:
            store.close()
            remove_rebuild(path, gen)
            raise
        # from here the new index is complete: nothing of it is removed any more
        for name in ("-journal", "-wal", "-shm"):  # the old database's (rolled back above)
            (path / (DB_NAME + name)).unlink(missing_ok=True)
        os.replace(store.db_path, path / DB_NAME)
        fsync_dir(path)
        for f in derived_files(path):
            if generation_of(f.name) != gen:
                f.unlink(missing_ok=True)
