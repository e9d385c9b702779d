"""Hubness reduction (CSLS): the fast paths against naive loops, the bundle files, and
search / annotation ranking by the corrected score."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import make_tiny_model, write_image
from vsekit.index.search import exact_search, rerank
from vsekit.runtime.hubness import (
    HUBNESS_INFO,
    Hubness,
    HubnessConfig,
    caption_bank_texts,
    mean_topk,
    mean_topks,
    quantize_rows,
    read_hubness,
    write_hubness,
)


def unit_rows(n: int, d: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def naive_mean_topk(x, bank, k):
    out = []
    for row in x:
        sims = sorted((float(row @ b) for b in bank), reverse=True)
        out.append(np.mean(sims[: min(k, len(bank))]))
    return np.array(out)


@pytest.mark.parametrize("k", [1, 3, 50])
def test_mean_topk_matches_naive(k):
    x, bank = unit_rows(37, 8, 0), unit_rows(20, 8, 1)
    np.testing.assert_allclose(mean_topk(x, bank, k, chunk=5), naive_mean_topk(x, bank, k),
                               rtol=1e-5, atol=1e-6)  # fmt: skip
    with pytest.raises(ValueError, match="k: must be at least 1"):
        mean_topk(x, bank, 0)
    with pytest.raises(ValueError, match="do not match"):
        mean_topk(x, bank[:, :4], 2)


def test_mean_topks_matches_mean_topk_for_each_k():
    x, bank = unit_rows(29, 8, 10), unit_rows(17, 8, 11)
    got = mean_topks(x, bank, (1, 4, 30), chunk=6)
    for k in (1, 4, 30):
        np.testing.assert_allclose(got[k], naive_mean_topk(x, bank, k), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="at least 1"):
        mean_topks(x, bank, (0, 2))


def test_csls_scores_match_the_formula():
    cfg = HubnessConfig(beta=0.7, k_text=3, k_image=2)
    img, txt = unit_rows(6, 8, 2), unit_rows(9, 8, 3)
    hub = Hubness(cfg, unit_rows(11, 8, 4), unit_rows(13, 8, 5))
    got = hub.scores(img, txt)
    for i in range(6):
        for t in range(9):
            r_i = naive_mean_topk(img[i : i + 1], hub.caption_bank, 3)[0]
            r_t = naive_mean_topk(txt[t : t + 1], hub.image_bank, 2)[0]
            assert got[i, t] == pytest.approx(img[i] @ txt[t] - 0.7 * r_i - 0.7 * r_t, abs=1e-5)
    with pytest.raises(ValueError, match="beta"):
        HubnessConfig(beta=-1)


def test_exact_search_bias_and_rerank_match_naive():
    emb, q = unit_rows(50, 8, 6), unit_rows(3, 8, 7)
    bias = np.random.default_rng(8).uniform(-0.3, 0, 50).astype(np.float32)
    live = np.ones(50, bool)
    live[[4, 9]] = False
    want = q @ emb.T + bias
    want[:, ~live] = -np.inf
    s, r = exact_search(emb, q, 5, live, chunk=7, bias=bias)
    for j in range(3):
        assert r[j].tolist() == np.argsort(-want[j], kind="stable")[:5].tolist()
        np.testing.assert_allclose(s[j], np.sort(want[j])[::-1][:5], rtol=1e-5)
    # re-ranking candidates that hold every live row gives the exact answer
    cand = np.tile(np.flatnonzero(live), (3, 1))[:, ::-1]
    s2, r2 = rerank(emb, q, cand, bias, 5)
    assert r2.tolist() == r.tolist()
    np.testing.assert_allclose(s2, s, rtol=1e-5)


def test_bundle_files_and_model_ranking(tmp_path):
    captions = ["a dog runs on grass", "a red car", "two people in the snow",
                "a cat sleeps", "a boy on a bike", "a man climbs a rock"]  # fmt: skip
    assert caption_bank_texts(captions + captions[:2], 2) == captions[::2]
    bundle = make_tiny_model(captions).save(tmp_path / "m")
    import vsekit

    plain = vsekit.load_model(str(bundle), backend="torch")
    assert plain.hubness is None
    photos = [write_image(tmp_path / f"p{i}.jpg", seed=i) for i in range(8)]
    img = plain.encode_image([str(p) for p in photos])
    cfg = HubnessConfig(beta=0.5, k_text=2, k_image=2, caption_stride=2)
    write_hubness(bundle, cfg, img[:5], {"source": "test"})
    got = read_hubness(bundle)
    assert got is not None and got[0] == cfg and got[1].shape == (5, img.shape[1])
    m = vsekit.load_model(str(bundle), backend="torch")
    hub = m.hubness
    assert hub is not None
    txt = m.encode_text(captions)
    bank_txt = m.encode_text(caption_bank_texts(captions, 2))
    np.testing.assert_allclose(hub.caption_bank, bank_txt, atol=1e-6)
    want = img @ txt.T
    want -= 0.5 * naive_mean_topk(img, bank_txt, 2)[:, None]
    q, scale = quantize_rows(img[:5])  # the bank as the bundle stores it
    np.testing.assert_allclose(q * scale[:, None], img[:5], atol=np.abs(img).max() / 254 + 1e-7)
    want -= 0.5 * naive_mean_topk(txt, q * scale[:, None], 2)[None, :]
    np.testing.assert_allclose(m.retrieval_scores(img, txt), want, atol=1e-4)
    # annotation ranks the pool by the corrected score
    best = m.annotate(str(photos[6]), k=3)
    assert [c for c, _ in best] == [captions[j] for j in np.argsort(-want[6])[:3]]
    # the pool's penalties are cached on disk, and a new process ranks the same from them
    from vsekit.fsio import cache_dir

    assert list((cache_dir() / "captions").glob(f"{m.fingerprint}-*-pen-{hub.key}-*.npy"))
    again = vsekit.load_model(str(bundle), backend="torch").annotate(str(photos[6]), k=3)
    assert [c for c, _ in again] == [c for c, _ in best]
    # a bank that is not the one recorded, or malformed settings: a one-line error
    bank_file = bundle / "hubness.npz"
    bank_file.write_bytes(bank_file.read_bytes()[:-1] + b"x")
    with pytest.raises(ValueError, match="sha256"):
        vsekit.load_model(str(bundle), backend="torch").hubness  # noqa: B018
    (bundle / HUBNESS_INFO).write_text('{"beta": 0.5}')
    with pytest.raises(ValueError, match=HUBNESS_INFO):
        vsekit.load_model(str(bundle), backend="torch").hubness  # noqa: B018


def test_index_search_ranks_by_csls_and_caches_penalties(tmp_path):
    import vsekit
    from tests.conftest import hubness_bundle
    from vsekit.index import Collection, model_info
    from vsekit.index.query import search_text, store_caches, text_query_bias

    bundle, photos = hubness_bundle(tmp_path)
    m = vsekit.load_model(str(bundle), backend="torch")
    coll = Collection(tmp_path / "idx", model_info(m, str(bundle)))
    coll.update(photos, m.encode_image, progress=False)
    key = m.hubness.key
    pen = coll.row_penalties(m.image_penalty, key)
    pen_file = tmp_path / "idx" / f"pen-{coll.generation}-{key}.f32"
    assert not pen_file.exists()  # reading computes them in memory and writes nothing
    store_caches(coll, m)  # the writer (vse index) stores them
    assert pen_file.is_file()
    np.testing.assert_allclose(pen, m.image_penalty(np.asarray(coll.emb)), atol=1e-6)
    q = m.encode_text(["a red car"])
    scores = (np.asarray(coll.emb) @ q[0]) - pen
    want = [coll.paths[int(np.flatnonzero(coll.rows == r)[0])] for r in np.argsort(-scores)[:4]]
    assert [h.path for h in search_text(coll, m, "a red car", k=4)] == want
    # photos added later: only their penalties are computed, the rest is read back
    for i in range(6, 9):
        write_image(photos / f"{i}.jpg", seed=i)
    coll.update(photos, m.encode_image, progress=False)
    calls = []
    writer = Collection(tmp_path / "idx")

    def counting(x):
        calls.append(len(x))
        return m.image_penalty(x)

    writer.store_caches(counting, key)
    assert calls == [3]  # only the new photos' penalties were computed
    calls.clear()
    pen2 = Collection(tmp_path / "idx").row_penalties(counting, key)
    assert calls == [] and len(pen2) == 9
    np.testing.assert_allclose(pen2, m.image_penalty(np.asarray(coll.emb)), atol=1e-6)
    assert np.allclose(text_query_bias(coll, m), -pen2)
    # with every penalty stored, a search never embeds the caption bank
    from vsekit.index.query import search_text_embedding

    fresh = vsekit.load_model(str(bundle), backend="torch")
    assert len(search_text_embedding(Collection(tmp_path / "idx"), fresh, q, k=2)) == 2
    assert callable(fresh.hubness._captions)


def test_cli_index_stores_penalties_and_info_shows_settings(tmp_path, capsys):
    import json

    from vsekit.cli import main

    captions = ["a dog runs", "a red car", "people in snow", "a cat"]
    bundle = make_tiny_model(captions).save(tmp_path / "m")
    photos = tmp_path / "photos"
    for i in range(4):
        write_image(photos / f"{i}.jpg", seed=i)
    rng_bank = unit_rows(3, 6, 9)
    write_hubness(bundle, HubnessConfig(beta=0.5, k_text=2, k_image=2, caption_stride=1),
                  rng_bank, {"source": "test"})  # fmt: skip
    idx = tmp_path / "idx"
    assert main(["index", str(photos), "--model", str(bundle), "--index", str(idx),
                 "--quiet"]) == 0  # fmt: skip
    assert len(list(idx.glob("pen-*.f32"))) == 1
    assert main(["search", "a red car", "--index", str(idx), "--k", "2", "--json"]) == 0
    capsys.readouterr()
    assert main(["model", "info", str(bundle), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["hubness"]["k_text"] == 2 and info["hubness"]["source"] == "test"
    assert main(["model", "info", str(bundle)]) == 0  # a short summary for people
    short = capsys.readouterr().out.splitlines()
    assert len(short) <= 10 and any(
        line.startswith("hubness:   CSLS, beta 0.5, k 2 / 2") for line in short
    )


def test_collection_faiss_search_with_bias_matches_exact(tmp_path):
    from vsekit.index import Collection

    coll = Collection(tmp_path / "idx", {"name": "t", "fingerprint": "f", "dim": 8})
    emb = unit_rows(60, 8, 12)
    photos = tmp_path / "p"
    for i in range(60):
        write_image(photos / f"{i:02d}.jpg", seed=i, size=8)
    rows = iter(emb)
    coll.update(photos, lambda ims: np.stack([next(rows) for _ in ims]), progress=False)
    bias = -np.random.default_rng(13).uniform(0, 0.4, coll.n_rows).astype(np.float32)
    q = unit_rows(2, 8, 14)
    exact = coll.search(q, 7, "exact", bias=bias)
    approx = coll.search(q, 7, "faiss", bias=bias)
    plain = coll.search(q, 7, "exact")
    for e, a, p in zip(exact, approx, plain, strict=True):
        assert [h.path for h in a] == [h.path for h in e]
        np.testing.assert_allclose([h.score for h in a], [h.score for h in e], rtol=1e-5)
        assert [h.path for h in p] != [h.path for h in e]  # the bias did change the ranking


def test_set_hubness_replaces_or_removes_it(tmp_path):
    m = make_tiny_model(["a dog runs", "a red car", "people in snow"])
    img, txt = unit_rows(4, 6, 15), m.encode_text(["a dog runs", "a red car"])
    assert m.hubness is None
    np.testing.assert_allclose(m.retrieval_scores(img, txt), img @ txt.T, atol=1e-6)
    hub = Hubness(HubnessConfig(k_text=1, k_image=1), unit_rows(3, 6, 16), unit_rows(5, 6, 17))
    m.set_hubness(hub)
    np.testing.assert_allclose(m.retrieval_scores(img, txt), hub.scores(img, txt), atol=1e-6)
    m.set_hubness(None)
    assert m.hubness is None
