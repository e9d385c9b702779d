"""Search beyond RAM: int8 row storage, IVF-PQ sized by a RAM budget and re-ranked from
the rows on disk, grown as the collection grows, each against the exact float path."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from tests.conftest import write_image
from vsekit.index import Collection, CollectionError, exact_search
from vsekit.index.ann import FaissSearcher, choose_spec, is_stale, parse_size
from vsekit.index.rows import Int8Rows, quantize_int8
from vsekit.index.search import rerank

DIM = 64
N = 10_000  # enough for 256 PQ centroids a sub-space without FAISS warnings


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


class PixelEmbedder:
    """64-d unit vectors from a photo's pixels (4x4 RGB and 4x4 grey, centred)."""

    def __call__(self, images) -> np.ndarray:
        out = []
        for im in images:
            rgb = np.asarray(im.resize((4, 4)), np.float32).reshape(-1) / 255
            grey = np.asarray(im.convert("L").resize((4, 4)), np.float32).reshape(-1) / 255
            out.append(np.concatenate([rgb, grey]) - 0.5)
        return unit(np.asarray(out))


def info(storage: str) -> dict:
    return {"name": "pixels", "fingerprint": "b16", "dim": DIM, "similarity": "cosine",
            "storage": storage}  # fmt: skip


def test_int8_rows_round_trip_against_float32():
    rng = np.random.default_rng(0)
    x = unit(rng.normal(size=(500, 256)))
    x[7] = 0  # an all-zero row stays zero
    rows = Int8Rows(quantize_int8(x), 256)
    assert rows.shape == (500, 256) and len(rows) == 500
    y = rows[:]
    scale = np.abs(x).max(axis=1, keepdims=True) / 127
    assert (np.abs(y - x) <= scale / 2 + 1e-7).all()  # half a step at most
    live = np.linalg.norm(x, axis=1) > 0
    cos = (x * y).sum(1)[live] / np.linalg.norm(y[live], axis=1)
    assert (cos >= 0.9995).all() and not y[7].any(), cos.min()
    idx = np.array([3, 1, 499])
    np.testing.assert_array_equal(rows[idx], y[idx])
    np.testing.assert_array_equal(rows[10:20], y[10:20])
    np.testing.assert_array_equal(rows[5], y[5])
    np.testing.assert_array_equal(np.asarray(rows), y)


@pytest.mark.parametrize("storage", ["f32", "int8"])
def test_scattered_reads_give_the_rows_the_plain_mapping_gives(tmp_path, storage):
    """Re-ranking's reader (MADV_RANDOM, MADV_WILLNEED on the rows asked for) against the
    ordinary memory map of the same file: rows by array, by int and by slice."""
    from vsekit.index.rows import ScatteredRows, for_scattered_reads, open_rows, row_file

    x = unit(np.random.default_rng(3).normal(size=(500, DIM)))
    rf = row_file(tmp_path / "rows", DIM, storage)
    rf.append(x)
    rf.sync()
    plain = open_rows(tmp_path / "rows", 500, DIM, storage)
    fast = for_scattered_reads(plain)
    assert isinstance(fast, ScatteredRows) and fast.shape == plain.shape
    idx = np.array([499, 0, 17, 17, 250])
    np.testing.assert_array_equal(fast[idx], np.asarray(plain[idx], np.float32))
    np.testing.assert_array_equal(fast[7], np.asarray(plain[7], np.float32))
    np.testing.assert_array_equal(fast[10:20], np.asarray(plain[10:20], np.float32))
    assert for_scattered_reads(x) is x  # not a file: as it is


def test_the_budget_chooses_the_structure():
    assert choose_spec(100_000, 2048, 4 << 30)[0] is None  # 0.8 GB of rows: IVF-Flat
    spec, nprobe = choose_spec(10_000_000, 2048, 4 << 30)
    assert spec == "OPQ256_512,IVF16384_HNSW32,PQ256x4fs" and nprobe == 128
    assert choose_spec(10_000_000, 2048, 1 << 30)[0] == "OPQ128_256,IVF16384_HNSW32,PQ128x4fs"
    assert choose_spec(1_000_000, 2048, 4 << 30)[0] == "OPQ256_512,IVF4096,PQ256x4fs"
    with pytest.raises(ValueError, match="--max-ram 100M: too small for 10,000,000 rows"):
        choose_spec(10_000_000, 2048, 100 << 20)
    # below 256 rows IVF-PQ cannot be trained (FAISS's assertion was the message)
    assert choose_spec(12, 2048, 150 << 10) == (None, 32)
    assert parse_size("4G") == 4 << 30 and parse_size("512m") == 512 << 20
    assert parse_size("1.5GiB") == 3 << 29 and parse_size("2000") == 2000
    for bad in ("lots", "-1G", "0", "nanG"):
        with pytest.raises(ValueError, match="--max-ram"):
            parse_size(bad)


@pytest.mark.parametrize("spec", ["IVF64,PQ16", "IVF64,PQ32x4fs"])  # 8-bit, fast scan
def test_ivfpq_reranked_from_int8_rows_finds_what_exact_search_finds(spec):
    """The fast path (PQ codes in RAM, int8 rows on disk) against exact float32 search:
    recall@10 of the re-ranked candidates, with and without a filter."""
    rng = np.random.default_rng(1)
    centres = unit(rng.normal(size=(40, DIM)))
    x = unit(centres[rng.integers(0, 40, N)] + 0.06 * rng.normal(size=(N, DIM)))
    q = unit(x[rng.choice(N, 50, replace=False)] + 0.03 * rng.normal(size=(50, DIM)))
    rows = Int8Rows(quantize_int8(x), DIM)
    fs = FaissSearcher(rows, spec=spec, nprobe=16)  # OPQ: the next tests
    assert fs.approximate and fs.n == N and fs.trained_on == N
    _, truth = exact_search(x, q, 10)
    _, cand = fs.search(q, 300)
    _, got = rerank(rows, q, cand, None, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, truth, strict=True)])
    assert recall >= 0.95, recall
    allowed = rng.random(N) < 0.1
    _, truth = exact_search(x, q, 10, allowed)
    _, cand = fs.search(q, 300, allowed)
    assert allowed[cand[cand >= 0]].all()
    _, got = rerank(rows, q, cand, None, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, truth, strict=True)])
    assert recall >= 0.9, recall
    assert not is_stale(fs, N) and is_stale(fs, 2 * N + 1) and is_stale(fs, N // 2 - 1)


def test_an_hnsw_coarse_quantizer_returns_the_nearest_lists():
    """The lists an HNSW coarse quantizer picks against the exact ranking of every
    centroid: with FAISS's default ``efSearch`` (16) it misses many of the ``nprobe``
    nearest (the positive control); the searcher widens it with ``nprobe``."""
    import faiss

    rng = np.random.default_rng(2)
    x = unit(rng.normal(size=(N, DIM)))
    q = unit(rng.normal(size=(100, DIM)))
    fs = FaissSearcher(x, spec="IVF512_HNSW32,PQ8", nprobe=128, train_size=N)
    ivf = faiss.extract_index_ivf(fs.index)
    quantizer = faiss.downcast_index(ivf.quantizer)
    centroids = faiss.downcast_index(quantizer.storage).reconstruct_n(0, ivf.nlist)
    exact = np.argsort(-(q @ centroids.T), axis=1)[:, :128]

    def overlap() -> float:
        _, got = quantizer.search(q, 128)
        return np.mean([len(set(a) & set(b)) / 128 for a, b in zip(got, exact, strict=True)])

    assert quantizer.hnsw.efSearch == 256 and overlap() >= 0.99
    quantizer.hnsw.efSearch = 16
    assert overlap() < 0.95


def _photos(folder, n, start=0):
    for i in range(start, start + n):
        write_image(folder / f"{i}.png", seed=i, size=8)


def test_an_int8_index_searches_like_a_float32_one(tmp_path):
    photos = tmp_path / "p"
    _photos(photos, 300)
    f32 = Collection(tmp_path / "f32", info("f32"))
    i8 = Collection(tmp_path / "i8", info("int8"))
    for c in (f32, i8):
        c.update(photos, PixelEmbedder(), progress=False)
    assert (tmp_path / "i8" / "emb-0.i8").stat().st_size == 300 * (DIM + 4)
    assert not list((tmp_path / "i8").glob("emb-*.f32"))
    q = PixelEmbedder()([Image.open(photos / f"{i}.png").convert("RGB") for i in (3, 50)])
    for a, b in zip(f32.search(q, 10, "exact"), i8.search(q, 10, "exact"), strict=True):
        assert [h.id for h in a][:3] == [h.id for h in b][:3]
        np.testing.assert_allclose([h.score for h in a], [h.score for h in b], atol=0.01)
    # deleting most photos and compacting keeps the int8 rows and the results
    for i in range(200):
        (photos / f"{i}.png").unlink()
    i8.update(photos, PixelEmbedder(), progress=False)
    with i8.store.writer() as w:
        assert i8.store.compact(w, min_garbage=1)
    i8.refresh()
    assert list((tmp_path / "i8").glob("emb-*")) == [tmp_path / "i8" / "emb-1.i8"]
    f32.update(photos, PixelEmbedder(), progress=False)
    for a, b in zip(f32.search(q, 10, "exact"), i8.search(q, 10, "exact"), strict=True):
        assert [h.id for h in a][:3] == [h.id for h in b][:3]


def test_a_snapshot_reads_its_rows_after_a_compaction_removed_their_file(tmp_path):
    """Re-ranking's reader is made at a snapshot's first approximate search, by the
    file's name: once a compaction has removed that file, the snapshot's own mapping
    (which keeps the removed file readable) serves instead."""
    photos = tmp_path / "p"
    _photos(photos, 60)
    coll = Collection(tmp_path / "i8", info("int8"))
    coll.update(photos, PixelEmbedder(), progress=False)
    snap = coll.snapshot
    want = np.asarray(snap.emb[np.arange(5)])
    for i in range(40):
        (photos / f"{i}.png").unlink()
    coll.update(photos, PixelEmbedder(), progress=False)
    with coll.store.writer() as w:
        assert coll.store.compact(w, min_garbage=1)
    assert not (tmp_path / "i8" / "emb-0.i8").exists()
    assert snap.scattered is snap.emb
    np.testing.assert_array_equal(snap.scattered[np.arange(5)], want)


def test_a_damaged_int8_index_is_named_and_repaired(tmp_path):
    photos = tmp_path / "p"
    _photos(photos, 20)
    c = Collection(tmp_path / "idx", info("int8"))
    c.update(photos, PixelEmbedder(), progress=False)
    c.close()
    f = tmp_path / "idx" / "emb-0.i8"
    with open(f, "r+b") as fh:
        fh.truncate(10 * (DIM + 4) + 7)  # a torn write: 10 whole rows and a piece
    with pytest.raises(CollectionError, match=r"emb-0.i8: truncated .* --repair"):
        Collection(tmp_path / "idx")
    c = Collection(tmp_path / "idx", repair=True)
    assert len(c) == 10
    rep = c.update(photos, PixelEmbedder(), progress=False)
    assert rep.added == 10 and len(c) == 20


def test_a_budget_beyond_ram_gives_ivfpq_grown_with_the_collection(tmp_path):
    """With a budget below the float rows, the stored FAISS index is IVF-PQ; searches
    re-rank from the int8 rows and equal exact search on this small collection, filters
    give k results whenever k exist, and new photos are added without training again."""
    photos = tmp_path / "p"
    _photos(photos, 400)
    c = Collection(tmp_path / "idx", info("int8"))
    c.update(photos, PixelEmbedder(), progress=False)
    c.store.set_ann_budget(60_000)  # 400 rows of 64 floats are 102 KB
    c.store_caches(faiss=True)
    rec = c.snapshot.meta["cache:faiss"]
    assert '"spec": "OPQ32_64,IVF64,PQ32x4fs"' in rec and '"trained_on": 400' in rec
    q = PixelEmbedder()([Image.open(photos / f"{i}.png").convert("RGB") for i in (1, 2, 3)])
    fresh = Collection(tmp_path / "idx")
    fs = fresh._faiss_for(fresh.snapshot)
    assert fs.approximate and fs.spec == "OPQ32_64,IVF64,PQ32x4fs"
    fs.rerank = 0  # re-rank only the PQ step's 4k + 100 best, not every row of 400
    for a, b in zip(fresh.search(q, 10, "faiss"), fresh.search(q, 10, "exact"), strict=True):
        assert a[0].id == b[0].id and len({h.id for h in a} & {h.id for h in b}) >= 9
        exact = {h.id: h.score for h in b}  # re-ranked scores are the rows' own
        assert all(abs(h.score - exact[h.id]) < 1e-6 for h in a if h.id in exact)

    class Tens:  # a filter keeping 10 photos (1x.png), as Filters.rows gives one
        def rows(self, snap):
            keep = np.zeros(snap.n_rows, bool)
            names = [p.rsplit("/", 1)[-1] for p in snap.paths]
            keep[snap.rows[[n[:-4].isdigit() and 10 <= int(n[:-4]) < 20 for n in names]]] = True
            return keep

    hits = fresh.search(q, 10, "faiss", filters=Tens())
    assert all(sorted(h.path[-6:] for h in hs) == [f"{i}.png" for i in range(10, 20)]
               for hs in hits)  # fmt: skip
    _photos(photos, 20, start=400)
    c.update(photos, PixelEmbedder(), progress=False)
    c.store_caches(faiss=True)
    rec = c.snapshot.meta["cache:faiss"]
    assert '"trained_on": 400' in rec and '"rows_seen": 420' in rec  # grown, not retrained
    grown = Collection(tmp_path / "idx")
    assert grown._faiss_for(grown.snapshot).n == 420
    q2 = PixelEmbedder()([Image.open(photos / "410.png").convert("RGB")])
    assert grown.search(q2, 1, "faiss")[0][0].path.endswith("410.png")


def test_cli_storage_and_budget(tmp_path, capsys):
    """`vse index --storage int8` makes an int8 index; another storage for an existing
    index needs --rebuild (which converts it); --max-ram is checked and recorded."""
    from tests.conftest import make_tiny_model
    from vsekit.cli import main

    bundle = str(make_tiny_model().save(tmp_path / "bundle"))
    photos = tmp_path / "photos"
    _photos(photos, 6)
    idx = str(tmp_path / "idx")
    run = ["index", str(photos), "--model", bundle, "--index", idx, "--quiet"]
    assert main([*run, "--max-ram", "lots"]) == 2
    assert "--max-ram: not a size: 'lots'" in capsys.readouterr().err
    assert not (tmp_path / "idx").exists()  # refused before anything was made
    assert main(run) == 0
    assert list((tmp_path / "idx").glob("emb-*")) == [tmp_path / "idx" / "emb-0.f32"]
    assert "hint:" not in capsys.readouterr().err
    import vsekit.cli.index as cli_index

    cli_index.INT8_HINT_ROWS, old_hint = 5, cli_index.INT8_HINT_ROWS
    try:  # a large float32 index gets a one-line suggestion
        assert main(run) == 0
        assert "--storage int8 --rebuild" in capsys.readouterr().err
    finally:
        cli_index.INT8_HINT_ROWS = old_hint
    assert main([*run, "--storage", "int8"]) == 2
    assert "stores its embeddings as f32; add --rebuild" in capsys.readouterr().err
    # --no-stack: the tiny random model embeds every photo alike (all would be one stack)
    assert main(["search", "a dog", "--index", idx, "--k", "6", "--no-stack"]) == 0
    before = capsys.readouterr().out
    assert main([*run, "--storage", "int8", "--rebuild", "--max-ram", "2G"]) == 0
    files = sorted(p.name for p in (tmp_path / "idx").glob("emb-*"))
    assert len(files) == 1 and files[0].endswith(".i8"), files
    c = Collection(idx)
    assert c.store.storage == "int8" and c.snapshot.meta["ann_max_ram"] == str(2 << 30)
    capsys.readouterr()
    assert main(["search", "a dog", "--index", idx, "--k", "6", "--no-stack"]) == 0
    after = capsys.readouterr().out
    assert [line.split()[-1] for line in after.splitlines()] == [
        line.split()[-1] for line in before.splitlines()
    ]  # the same photos in the same order
    assert main(run) == 0  # later updates keep the int8 storage without the flag
    assert Collection(idx).store.storage == "int8"
    # too few rows for IVF-PQ: they stay in float, and the note says so
    assert main([*run, "--max-ram", "100"]) == 0
    assert "too few to train IVF-PQ" in capsys.readouterr().err
    assert Collection(idx).snapshot.meta["ann_max_ram"] == "100"
    assert main(["search", "a dog", "--index", idx, "--k", "6", "--method", "faiss",
                 "--no-stack"]) == 0  # fmt: skip
    assert [line.split()[-1] for line in capsys.readouterr().out.splitlines()] == [
        line.split()[-1] for line in before.splitlines()
    ]
    (tmp_path / "idx" / "index.sqlite").write_bytes(b"not a database" * 100)
    assert main(run) == 2
    assert "--rebuild" in capsys.readouterr().err
    assert main([*run, "--rebuild", "--storage", "int8"]) == 0  # the cure it names works
    assert Collection(idx).store.storage == "int8" and len(Collection(idx)) == 6


def test_the_service_searches_an_index_beyond_ram(tmp_path):
    """`vse serve` over an int8 index whose stored FAISS index is IVF-PQ: the same hits
    as the library's exact search, and the same refusals (host check, bad input)."""
    from fastapi.testclient import TestClient

    from tests.conftest import make_tiny_model
    from vsekit.serve.app import create_app

    model = make_tiny_model(["a dog runs on grass", "a red car"])
    photos = tmp_path / "photos"
    for i in range(400):
        write_image(photos / f"p{i}.png", seed=i, size=8)
    coll = Collection(tmp_path / "idx", dict(model_info_of(model), storage="int8"))
    coll.update(photos, model.encode_image, progress=False)
    dim = int(coll.dim)
    coll.store.set_ann_budget(400 * dim * 4 * 2 - 1)  # just below the float rows' fit
    coll.store_caches(faiss=True)
    assert '"spec": "OPQ' in coll.snapshot.meta["cache:faiss"]
    served = Collection(tmp_path / "idx")
    served._faiss_for(served.snapshot).rerank = 0  # the PQ step's own 4k + 100 candidates
    c = TestClient(create_app(served, model, method="faiss"), base_url="http://127.0.0.1")
    r = c.get("/search", params={"q": "a red car", "k": 5})
    assert r.status_code == 200
    exact = coll.search(model.encode_text("a red car")[None], 5, "exact")[0]
    got = [h["id"] for h in r.json()["results"]]
    assert got[0] == exact[0].id and len(set(got) & {h.id for h in exact}) >= 4
    assert c.get("/search", params={"q": "", "k": 5}).status_code == 422
    evil = TestClient(create_app(Collection(tmp_path / "idx"), model), base_url="http://evil.com")
    assert evil.get("/search", params={"q": "a red car"}).status_code == 403  # DNS rebinding


def model_info_of(model) -> dict:
    from vsekit.index import model_info

    return model_info(model, "tiny")
