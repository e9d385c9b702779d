"""Reading an index writes nothing and trusts no damaged cache; opening it for a search
loads the model once; a snapshot is one consistent state."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import hubness_bundle, make_tiny_model, write_image
from vsekit.cli import main


def _files(index: Path) -> dict[str, tuple[int, int]]:
    """Every file under the index with its size and mtime."""
    return {
        p.name: (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(index.iterdir())
        if p.is_file()
    }


@pytest.fixture
def hub_index(tmp_path):
    """A tiny model with hubness reduction, and an index of 6 photos made by `vse index`."""
    bundle, photos = hubness_bundle(tmp_path)
    idx = tmp_path / "idx"
    assert main(["index", str(photos), "--model", str(bundle), "--index", str(idx), "--quiet"]) == 0
    return bundle, idx


def _search(idx: Path, capsys) -> list[str]:
    capsys.readouterr()
    assert main(["search", "a red car", "--index", str(idx), "--k", "3", "--json"]) == 0
    return capsys.readouterr().out


def test_search_changes_no_file_with_or_without_caches(hub_index, capsys):
    """`vse search` leaves the index exactly as it found it: same files, sizes and
    mtimes, whether `vse index` stored the caches or they were deleted."""
    _, idx = hub_index
    assert list(idx.glob("pen-*.f32")), "vse index stores the photos' penalties"
    before = _files(idx)
    with_caches = _search(idx, capsys)
    assert _files(idx) == before
    for f in idx.glob("pen-*.f32"):
        f.unlink()
    before = _files(idx)
    without = _search(idx, capsys)
    assert _files(idx) == before  # computed in memory, not written back
    assert without == with_caches


@pytest.mark.parametrize("damage", ["flip", "zeros", "nan", "truncate"])
def test_a_damaged_penalty_cache_is_never_used(hub_index, capsys, damage):
    """Penalties whose bytes no longer match their recorded sha256 are recomputed, so
    the ranking is the undamaged one (a flipped bit, zeros, NaNs or a cut file)."""
    _, idx = hub_index
    good = _search(idx, capsys)
    (pen,) = idx.glob("pen-*.f32")
    raw = bytearray(pen.read_bytes())
    if damage == "flip":  # one bit of every value's exponent: the ranking would change
        for b in range(3, len(raw), 4):
            raw[b] ^= 0x40
    elif damage == "zeros":
        raw[:] = bytes(len(raw))
    elif damage == "nan":
        raw[:] = np.full(len(raw) // 4, np.nan, np.float32).tobytes()
    else:
        raw = raw[:-4]
    pen.write_bytes(bytes(raw))
    assert _search(idx, capsys) == good


def test_open_collection_loads_the_model_once(hub_index, monkeypatch):
    """The precision whose fingerprint is the index's is found before loading: one load,
    and the fingerprint is checked by one function."""
    import vsekit.index.query as query

    bundle, idx = hub_index
    loads = []
    real = query.load_model

    def counting(*a, **kw):
        loads.append((a, kw))
        return real(*a, **kw)

    monkeypatch.setattr(query, "load_model", counting)
    coll, model = query.open_collection(idx)
    assert len(loads) == 1 and model.fingerprint == coll.fingerprint
    other = make_tiny_model(["a dog"], seed=7).save(idx.parent / "other")
    from vsekit.index import CollectionError

    with pytest.raises(CollectionError, match="built with model"):
        query.open_collection(idx, str(other))


def test_snapshot_is_one_state_while_a_writer_commits(tmp_path):
    """A snapshot taken before a writer commits keeps answering from its own state; the
    next one sees the commit."""
    from tests.test_index import INFO, CountingEmbedder
    from vsekit.index import Collection

    photos = tmp_path / "p"
    for i in range(4):
        write_image(photos / f"{i}.png", seed=i)
    reader = Collection(tmp_path / "idx", INFO)
    reader.update(photos, CountingEmbedder(), progress=False)
    snap = reader.snapshot
    writer = Collection(tmp_path / "idx")
    for i in range(4, 8):
        write_image(photos / f"{i}.png", seed=i)
    writer.update(photos, CountingEmbedder(), progress=False)
    q = np.asarray(snap.emb[:1])
    old = reader.search(q, k=10, method="exact", snap=snap)[0]
    assert len(old) == 4 and len(snap) == 4
    assert len(reader.search(q, k=10, method="exact")[0]) == 8


def test_writer_connection_is_never_opened_by_a_search(hub_index, capsys, monkeypatch):
    """Searching goes through the read-only connection only."""
    from vsekit.index import store

    _, idx = hub_index

    def refuse(self):
        raise AssertionError("a search opened the read-write connection")

    monkeypatch.setattr(store.IndexStore, "_writer_db", refuse)
    assert _search(idx, capsys)
    assert os.path.exists(idx / "index.sqlite")


def test_row_file_keeps_committed_rows_and_drops_a_torn_batch(tmp_path):
    """The one crash-safe row store: bytes past the committed count (an interrupted
    batch, even a partial row) are cut by truncate; a wrong width is refused."""
    from vsekit.fsio import RowFile

    f = RowFile(tmp_path / "rows.f32", 3)
    f.truncate(0)
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    f.append(a)
    f.sync()
    with open(f.path, "ab") as fh:  # a torn write: one row and a half
        fh.write(np.ones(5, np.float32).tobytes())
    assert f.rows_on_disk() == 3
    f.truncate(2)
    f.append(a + 10)
    f.sync()
    got = np.fromfile(f.path, np.float32).reshape(-1, 3)
    np.testing.assert_array_equal(got, np.concatenate([a, a + 10]))
    with pytest.raises(ValueError, match=r"expected \(n, 3\)"):
        f.append(np.zeros((1, 4), np.float32))


def _built(tmp_path):
    from tests.test_index import INFO, CountingEmbedder
    from vsekit.index import Collection

    photos = tmp_path / "p"
    for i in range(4):
        write_image(photos / f"{i}.png", seed=i)
    coll = Collection(tmp_path / "idx", INFO)
    coll.update(photos, CountingEmbedder(), progress=False)
    coll.close()
    return tmp_path / "idx", photos


def test_an_index_made_with_a_wal_journal_opens_updates_and_searches(tmp_path):
    """Indexes written before the rollback journal used WAL: the first open converts
    them under the lock; then updates work and searches leave no -wal/-shm files."""
    import sqlite3

    from tests.test_index import CountingEmbedder
    from vsekit.index import Collection

    idx, photos = _built(tmp_path)
    db = sqlite3.connect(idx / "index.sqlite")
    assert db.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    db.close()
    coll = Collection(idx)
    write_image(photos / "9.png", seed=9)
    assert coll.update(photos, CountingEmbedder(), progress=False).added == 1
    coll.close()
    before = _files(idx)
    q = np.asarray(Collection(idx).snapshot.emb[:1])
    assert len(Collection(idx).search(q, k=3)[0]) == 3
    assert _files(idx) == before and not list(idx.glob("*-wal"))


def test_a_writer_killed_mid_transaction_leaves_an_index_that_searches(tmp_path):
    """A hot journal (a writer killed after pages reached the database file) is rolled
    back by the next open, under the lock; the committed rows are all there."""
    import subprocess
    import sys

    from vsekit.index import Collection

    idx, _ = _built(tmp_path)
    kill = f"""
import os, sqlite3
db = sqlite3.connect({str(idx / "index.sqlite")!r})
db.execute("PRAGMA cache_size=1")
db.execute("BEGIN")
for i in range(3000):
    db.execute("INSERT INTO failed VALUES (?, 0, 0, ?)", (f"/x/{{i}}", "e" * 200))
os._exit(9)
"""
    subprocess.run([sys.executable, "-c", kill], check=False)
    journal = idx / "index.sqlite-journal"
    assert journal.is_file() and journal.stat().st_size > 0  # the hot journal is there
    coll = Collection(idx)
    assert len(coll) == 4 and coll.failures() == []
    assert len(coll.search(np.asarray(coll.snapshot.emb[:1]), k=4)[0]) == 4
