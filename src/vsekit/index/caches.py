"""Derived caches of an index: each photo's hubness penalty and the FAISS index (which
grows with the collection: rows added since it was stored are added to it, and it is
trained again only when stale).

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
from vsekit.index.ann import DEFAULT_MAX_RAM, FaissSearcher, choose_spec, is_stale
from vsekit.index.schema import set_meta
from vsekit.index.snapshot import Snapshot
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


def _faiss_name(generation: int, fs: FaissSearcher) -> str:
    return f"faiss-{generation}-{fs.rows_seen}-{fs.n}.index"


def ann_budget(snap: Snapshot) -> int:
    """The RAM budget of the index's ANN structure (``vse index --max-ram``, recorded)."""
    return int(snap.meta.get("ann_max_ram", DEFAULT_MAX_RAM))


def _load_faiss(index: Path, snap: Snapshot) -> FaissSearcher | None:
    """The stored FAISS index of this generation, verified, as stored (it may lack the
    newest rows, and hold rows deleted since), or None."""
    rec = _record(snap, "faiss")
    if not rec or rec.get("generation") != snap.generation:
        return None
    if "rows_seen" not in rec:  # written before indexes grew: exactly one state's rows
        if rec["file"] != f"faiss-{snap.generation}-{snap.n_rows}-{len(snap)}.index":
            return None
        rec = dict(rec, rows_seen=snap.n_rows, trained_on=snap.n_live)
    if rec["rows_seen"] > snap.n_rows:
        return None
    f = index / rec["file"]
    try:
        if _sha256(f) != rec["sha256"]:
            return None
        return FaissSearcher.load(f, rec.get("nprobe"), rec.get("spec"), rec["trained_on"],
                                  rec["rows_seen"])  # fmt: skip
    except (OSError, RuntimeError, KeyError):
        return None


def _add_new_rows(fs: FaissSearcher, snap: Snapshot) -> None:
    """Add the live rows written since ``fs`` last grew (no training)."""
    fresh = np.flatnonzero(snap.live[fs.rows_seen :]) + fs.rows_seen
    fs.add(snap.emb, fresh)
    fs.rows_seen = snap.n_rows


def cached_faiss(index: Path, snap: Snapshot) -> FaissSearcher | None:
    """The stored FAISS index of this snapshot's generation, verified, with the rows
    added since it was stored added in memory (nothing is written), or None when there
    is none, it was made under another RAM budget, or it is stale (the structure the
    budget chose is kept until then, even across a size where it would choose another)."""
    fs = _load_faiss(index, snap)
    if fs is None or is_stale(fs, snap.n_live):
        return None
    rec = _record(snap, "faiss") or {}
    if "max_ram" in rec:  # kept until stale, unless the budget changed: no churn at a boundary
        if rec["max_ram"] != ann_budget(snap):
            return None
    elif fs.spec != choose_spec(snap.n_live, snap.dim, ann_budget(snap))[0]:
        return None
    _add_new_rows(fs, snap)
    return fs


def new_faiss(snap: Snapshot) -> FaissSearcher:
    """A FAISS index of ``snap``'s live rows, trained on them (:func:`choose_spec`)."""
    spec, nprobe = choose_spec(snap.n_live, snap.dim, ann_budget(snap))
    return FaissSearcher(snap.emb, snap.live, spec=spec, nprobe=nprobe)


def write_faiss(index: Path, w: sqlite3.Connection, snap: Snapshot) -> None:
    """Store the FAISS index of ``snap`` (the writer's, under its lock): the stored one
    grown by the rows added since, or a new one when there is none, the budget calls
    for another structure, or it is stale (:func:`vsekit.index.ann.is_stale`)."""
    rec = _record(snap, "faiss") or {}
    fs = cached_faiss(index, snap)
    if fs is not None and rec.get("file") == _faiss_name(snap.generation, fs):
        return  # nothing new
    if fs is None:
        with progress_bar(snap.n_live, "FAISS index (trained once, then grown)", "row") as bar:
            fs = new_faiss(snap)  # a few seconds a million rows for IVF-Flat
            bar.update(snap.n_live)
    name = _faiss_name(snap.generation, fs)
    fs.save(index / name)
    rec = {"file": name, "generation": snap.generation, "sha256": _sha256(index / name),
           "spec": fs.spec, "nprobe": fs.nprobe, "trained_on": fs.trained_on,
           "rows_seen": fs.rows_seen, "max_ram": ann_budget(snap)}  # fmt: skip
    with w:
        set_meta(w, **{"cache:faiss": json.dumps(rec)})
    for old in index.glob(f"faiss-{snap.generation}-*.index"):  # this generation's
        if old.name != name:
            old.unlink(missing_ok=True)
