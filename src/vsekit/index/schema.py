"""The index database's schema and the small helpers every module writing or reading it
shares: how paths are bound, how text is decoded, how ``meta`` is set, and the one check
that an index and a model belong together."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

INDEX_VERSION = 1

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
CREATE TABLE IF NOT EXISTS photo_meta (
    file_id INTEGER PRIMARY KEY,
    taken TEXT,
    taken_from TEXT NOT NULL,
    make TEXT,
    model TEXT,
    lat REAL,
    lon REAL,
    sha256 TEXT,
    phash TEXT,
    phash_crops TEXT
);
CREATE TABLE IF NOT EXISTS sums (start INTEGER PRIMARY KEY, crcs BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS failed (
    path TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    error TEXT NOT NULL
);
"""
#: every embedding row in use: files' own rows and their video segments' rows
ALL_ROWS = "SELECT row FROM files UNION ALL SELECT row FROM segments"


class CollectionError(ValueError):
    """An index could not be opened or does not fit the model; names the path."""


class DamagedIndex(CollectionError):
    """Stored embeddings changed since they were written; ``--repair`` is the fix."""


#: how SQL binds a file path: its bytes as TEXT (see :func:`path_param`)
PATH = "CAST(? AS TEXT)"


def path_param(path: str) -> bytes:
    """A path as a query parameter, for :data:`PATH`: its file-system bytes, so that a
    name that is not UTF-8 (undecodable bytes, which Python holds as surrogates) is
    stored losslessly. A UTF-8 name gives the very TEXT a ``str`` would."""
    return os.fsencode(path)


def decode_text(raw: bytes) -> str:
    """The connections' text factory: UTF-8, with a stored non-UTF-8 path's bytes back
    as surrogates (:func:`os.fsdecode` would give the same)."""
    return raw.decode("utf-8", "surrogateescape")


def set_meta(w: sqlite3.Connection, **kv) -> None:
    w.executemany(
        "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
        [(k, str(v)) for k, v in kv.items()],
    )


def check_model(index: Path, meta: dict[str, str], model_info: dict) -> None:
    """The one check that an index and a model belong together: CollectionError naming
    both fingerprints when the model's embeddings are not the index's."""
    if model_info["fingerprint"] == meta["fingerprint"]:
        return
    was, now = meta.get("precision") or None, model_info.get("precision")
    if meta["model"] == model_info["name"] and was and now and was != now:
        raise CollectionError(
            f"{index}: built with model {meta['model']!r} at {was} precision, and this run "
            f"uses {now} (VSEKIT_PRECISION or --precision): use {was}, or rebuild the index "
            "with --rebuild"
        )
    why = " (another version of it, or another precision)" if meta["model"] == model_info[
        "name"] else ""  # fmt: skip
    raise CollectionError(
        f"{index}: built with model {meta['model']!r} ({meta['fingerprint']}), "
        f"not {model_info['name']!r} ({model_info['fingerprint']}){why}; "
        "use that model or rebuild the index with --rebuild"
    )
