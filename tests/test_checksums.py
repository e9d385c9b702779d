"""Stored embedding rows are checksummed: damage that leaves finite values (a flipped
exponent bit gave rows of about 1e34 that search ranked first) is refused at open,
dropped by ``--repair`` and caught when a search reads the row."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from tests.test_big_index import DIM, PixelEmbedder, _photos, info
from vsekit.index import Collection, CollectionError
from vsekit.index.checksums import crcs_of, raw_rows
from vsekit.index.rows import emb_path, row_bytes


def _build(tmp_path, storage: str, n: int = 12) -> tuple[Collection, object]:
    photos = tmp_path / "p"
    _photos(photos, n)
    coll = Collection(tmp_path / "idx", info(storage))
    coll.update(photos, PixelEmbedder(), batch_size=5, progress=False)
    return coll, photos


def _flip_exponent(tmp_path, storage: str, row: int) -> None:
    """Flip bit 30 of one value of ``row`` (an exponent bit of a float32; of the int8
    storage, a bit of the row's float32 scale): the size stays, values stay finite."""
    f = emb_path(tmp_path / "idx", 0, storage)
    at = row * row_bytes(DIM, storage) + (DIM if storage == "int8" else 8)
    with open(f, "r+b") as fh:
        fh.seek(at)
        word = bytearray(fh.read(4))
        word[3] ^= 0x40
        fh.seek(at)
        fh.write(word)


@pytest.mark.parametrize("storage", ["f32", "int8"])
def test_a_flipped_exponent_bit_is_refused_at_open_and_repaired(tmp_path, storage):
    coll, photos = _build(tmp_path, storage)
    victim = coll.path_of(int(coll.ids[coll.row_to_pos[7]]))
    coll.close()
    _flip_exponent(tmp_path, storage, 7)
    with pytest.raises(
        CollectionError, match=r"1 embeddings changed since they were written.*--repair"
    ):
        Collection(tmp_path / "idx")
    coll = Collection(tmp_path / "idx", repair=True)
    assert len(coll) == 11 and victim not in coll.paths
    emb = PixelEmbedder()
    rep = coll.update(photos, emb, progress=False)
    assert rep.added == 1 and len(coll) == 12  # only the damaged photo is embedded again
    Collection(tmp_path / "idx").check()


@pytest.mark.filterwarnings("ignore:overflow encountered")  # the damaged row's score
@pytest.mark.parametrize("storage", ["f32", "int8"])
def test_damage_after_open_is_caught_when_a_search_reads_the_row(tmp_path, storage):
    coll, photos = _build(tmp_path, storage)
    snap = coll.snapshot
    q = np.asarray(snap.emb[3], np.float32)[None]
    assert coll.search(q, 3, "exact")[0][0].path == snap.paths[int(snap.row_to_pos[3])]
    _flip_exponent(tmp_path, storage, 3)  # the mapping sees the new bytes
    with pytest.raises(CollectionError, match=r"changed since they were written.*--repair"):
        coll.search(q, 12, "exact", snap=snap)  # every row is read
    with pytest.raises(CollectionError, match="changed since they were written"):
        coll.embedding_of(int(snap.ids[snap.row_to_pos[3]]))


def test_every_committed_row_has_the_checksum_of_its_bytes(tmp_path):
    coll, _ = _build(tmp_path, "f32", n=13)  # three batches of 5, 5 and 3
    snap = coll.snapshot
    assert snap.crc_known.all() and len(snap.crc) == 13
    np.testing.assert_array_equal(snap.crc, crcs_of(raw_rows(snap.emb)))


def test_compaction_keeps_checksums_and_refuses_to_copy_damage(tmp_path):
    coll, photos = _build(tmp_path, "f32", n=12)
    for p in sorted(photos.iterdir())[:8]:
        p.unlink()
    coll.update(photos, PixelEmbedder(), progress=False)  # 8 dead rows of 12
    with coll.store.writer() as w:
        assert coll.store.compact(w, min_garbage=1)
    coll.refresh()
    snap = coll.snapshot
    assert snap.generation == 1 and snap.n_rows == 4 and snap.crc_known.all()
    np.testing.assert_array_equal(snap.crc, crcs_of(raw_rows(snap.emb)))
    # damage in a live row is never laundered into a new generation's checksums
    _photos(photos, 8, start=100)
    coll.update(photos, PixelEmbedder(), progress=False)
    for p in sorted(photos.iterdir())[:9]:
        p.unlink()
    coll.update(photos, PixelEmbedder(), progress=False)
    live = coll.snapshot.rows[0]
    f = emb_path(tmp_path / "idx", 1)
    with open(f, "r+b") as fh:
        fh.seek(int(live) * DIM * 4)
        fh.write(b"\x00\x00\x80\x7e")
    with coll.store.writer() as w, pytest.raises(CollectionError, match="damaged.*--repair"):
        coll.store.compact(w, min_garbage=1)


def test_an_index_from_before_checksums_gets_them_after_a_norm_check(tmp_path):
    coll, photos = _build(tmp_path, "f32")
    coll.close()
    db = sqlite3.connect(tmp_path / "idx" / "index.sqlite")
    db.execute("DROP TABLE sums")  # as an index written before checksums were kept
    db.commit()
    db.close()
    _flip_exponent(tmp_path, "f32", 5)  # 1e34-sized values: far from unit norm
    with pytest.raises(CollectionError, match="1 embeddings changed"):
        Collection(tmp_path / "idx")
    coll = Collection(tmp_path / "idx", repair=True)
    assert len(coll) == 11
    snap = coll.snapshot
    assert snap.crc_known[snap.rows].all()  # the sound rows got checksums in the repair
    coll.update(photos, PixelEmbedder(), progress=False)
    assert len(coll) == 12 and coll.snapshot.crc_known[coll.snapshot.rows].all()


@pytest.mark.filterwarnings("ignore:overflow encountered")
def test_the_service_answers_503_with_the_repair_for_a_damaged_row(tmp_path):
    """A damaged row found while serving is the index's fault: 503 naming --repair, not
    400 (which blamed the request) or 500."""
    from fastapi.testclient import TestClient

    from tests.conftest import make_tiny_model, write_image
    from vsekit.index import model_info
    from vsekit.serve.app import create_app

    model = make_tiny_model(["a dog runs on grass", "a red car"])
    photos = tmp_path / "photos"
    for i in range(4):
        write_image(photos / f"p{i}.jpg", seed=i, size=48)
    coll = Collection(tmp_path / "idx", model_info(model, "tiny"))
    coll.update(photos, model.encode_image, progress=False)
    client = TestClient(create_app(coll, model), base_url="http://127.0.0.1")
    first = client.get("/search", params={"q": "a dog", "k": 4, "stack": "false"}).json()
    victim = first["results"][0]["id"]
    row = int(coll.snapshot.rows[coll.snapshot.id_to_pos[victim]])
    f = emb_path(tmp_path / "idx", 0)
    dim = coll.dim
    with open(f, "r+b") as fh:  # after the service opened the index
        fh.seek(row * dim * 4)
        word = bytearray(fh.read(4))
        word[3] ^= 0x40
        fh.seek(row * dim * 4)
        fh.write(word)
    for res in (
        client.get("/search", params={"q": "a dog", "k": 4, "stack": "false"}),
        client.get("/search", params={"q": f"#{victim}"}),
        client.get(f"/annotate/{victim}"),
    ):
        assert res.status_code == 503, res.text
        assert "--repair" in res.json()["error"]


def test_checksums_of_another_generation_are_never_held_against_its_rows(tmp_path):
    """A vsekit without checksums that compacted the index wrote its rows to a new
    generation in another order and left the old checksums behind: they must not make
    every sound row look damaged (and --repair drop them)."""
    coll, photos = _build(tmp_path, "f32", n=6)
    snap = coll.snapshot
    coll.close()
    idx = tmp_path / "idx"
    order = snap.rows[::-1].copy()  # as an older compaction might write them
    np.asarray(snap.emb)[order].tofile(emb_path(idx, 1))
    db = sqlite3.connect(idx / "index.sqlite")
    with db:
        for new_row, file_id in enumerate(snap.ids[::-1]):
            db.execute("UPDATE files SET row = ? WHERE id = ?", (new_row, int(file_id)))
        db.execute("UPDATE meta SET value = '1' WHERE key = 'generation'")
    db.close()
    emb_path(idx, 0).unlink()
    coll = Collection(idx)  # the old sums are another generation's: not used
    assert not coll.snapshot.crc_known.any()
    coll.update(photos, PixelEmbedder(), progress=False)  # the writer gives them theirs
    snap = coll.snapshot
    assert snap.crc_known.all() and len(coll) == 6
    np.testing.assert_array_equal(snap.crc, crcs_of(raw_rows(snap.emb)))
