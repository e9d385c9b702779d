"""Derived caches of an index: each photo's hubness penalty and the FAISS index.

Only a writer (``vse index``, under the index's lock) writes them: the file atomically,
then a record in ``meta`` (``cache:...``: file, generation, rows, sha256) in one
transaction. A reader uses a cache only when its record matches the snapshot it reads
and the file's sha256 and values check out; otherwise it computes what it needs in
memory. A search therefore never writes, and never trusts a damaged cache.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import numpy as np

from vsekit.fsio import atomic_write
from vsekit.index.search import FaissSearcher
from vsekit.index.snapshot import Snapshot
from vsekit.index.store import set_meta
from vsekit.progress import progress_bar

PenaltyFn = Callable[[np.ndarray], np.ndarray]
BLOCK = 4096


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _record(snap: Snapshot, name: str) -> dict | None:
    raw = snap.meta.get(f"cache:{name}")
    return json.loads(raw) if raw else None


def cached_penalties(index: Path, snap: Snapshot, key: str) -> np.ndarray:
    """The stored penalties of the first rows of ``snap`` (possibly none): only those of a
    record of this generation whose file matches its sha256 and holds finite values."""
    rec = _record(snap, f"pen:{key}")
    if not rec or rec["generation"] != snap.generation or rec["rows"] > snap.n_rows:
        return np.zeros(0, np.float32)
    try:  # the bytes that are checked are the bytes that are used
        data = (index / rec["file"]).read_bytes()
    except OSError:
        return np.zeros(0, np.float32)
    if hashlib.sha256(data).hexdigest() != rec["sha256"] or len(data) % 4:
        return np.zeros(0, np.float32)
    pen = np.frombuffer(data, np.float32).copy()
    if len(pen) != rec["rows"] or not np.isfinite(pen).all():
        return np.zeros(0, np.float32)
    return pen


def complete_penalties(snap: Snapshot, have: np.ndarray, penalty: PenaltyFn) -> np.ndarray:
    """``[n_rows]``: ``have`` followed by ``penalty`` of the rows it lacks (in blocks)."""
    new = [np.asarray(penalty(np.asarray(snap.emb[a : min(a + BLOCK, snap.n_rows)])), np.float32)
           for a in range(len(have), snap.n_rows, BLOCK)]  # fmt: skip
    return np.concatenate([have, *new]) if new else have


def write_penalties(
    index: Path, w: sqlite3.Connection, snap: Snapshot, key: str, penalty: PenaltyFn
) -> np.ndarray:
    """Store every row's penalty for ``snap`` (the writer's snapshot, under its lock),
    computing only the rows the verified cache lacks; returns them."""
    have = cached_penalties(index, snap, key)
    pen = complete_penalties(snap, have, penalty)
    if not np.isfinite(pen).all():
        raise ValueError(f"{index}: the model gave non-finite hubness penalties")
    if len(have) == len(pen) and len(pen):
        return pen
    name = f"pen-{snap.generation}-{key}.f32"
    atomic_write(index / name, pen.tobytes())
    rec = {"file": name, "generation": snap.generation, "rows": len(pen),
           "sha256": hashlib.sha256(pen.tobytes()).hexdigest()}  # fmt: skip
    with w:
        w.execute("DELETE FROM meta WHERE key LIKE 'cache:pen:%'")
        set_meta(w, **{f"cache:pen:{key}": json.dumps(rec)})
    for old in index.glob(f"pen-{snap.generation}-*.f32"):  # this generation's
        if old.name != name:
            old.unlink(missing_ok=True)
    return pen


def _faiss_name(snap: Snapshot) -> str:
    return f"faiss-{snap.generation}-{snap.n_rows}-{len(snap)}.index"


def cached_faiss(index: Path, snap: Snapshot) -> FaissSearcher | None:
    """The stored FAISS index of exactly this snapshot's rows, verified, or None."""
    rec = _record(snap, "faiss")
    if not rec or rec["file"] != _faiss_name(snap):
        return None
    f = index / rec["file"]
    try:
        if _sha256(f) != rec["sha256"]:
            return None
        return FaissSearcher.load(f)
    except (OSError, RuntimeError):
        return None


def write_faiss(index: Path, w: sqlite3.Connection, snap: Snapshot) -> None:
    """Build and store the FAISS index of ``snap`` (the writer's, under its lock)."""
    if cached_faiss(index, snap) is not None:
        return
    name = _faiss_name(snap)
    with progress_bar(len(snap), "FAISS index (once per change)", "row") as bar:
        FaissSearcher(snap.emb, snap.live).save(index / name)  # a few seconds a million rows
        bar.update(len(snap))
    rec = {"file": name, "generation": snap.generation, "sha256": _sha256(index / name)}
    with w:
        set_meta(w, **{"cache:faiss": json.dumps(rec)})
    for old in index.glob(f"faiss-{snap.generation}-*.index"):  # this generation's
        if old.name != name:
            old.unlink(missing_ok=True)
