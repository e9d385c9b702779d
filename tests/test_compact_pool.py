"""The caption pool shipped in a compact form (vsekit.runtime.compact) against the
computed float32 pool, the shipped default against its text graph, and a pool that is
computed once per machine however many processes ask (a lock file, waited on)."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from tests.conftest import hubness_bundle
from vsekit.bundle import ModelError, verify_bundle
from vsekit.runtime.compact import COMPACT_FILE, COMPACT_INFO, decode_z, encode, write_compact
from vsekit.runtime.parity import SAMPLE_PHOTOS


def shipped_photos() -> list:
    return sorted(SAMPLE_PHOTOS.glob("*.jpg"))


class Counting:
    """Wraps a model's ``encode_text``: counts the texts, and blocks while ``gate`` is
    clear (a hook: the test decides when the embedding finishes)."""

    def __init__(self, model, gate: threading.Event | None = None) -> None:
        self.inner, self.gate, self.count = model.encode_text, gate, 0
        self.started = threading.Event()

    def __call__(self, texts, *a, **kw):
        self.count += 1 if isinstance(texts, str) else len(texts)
        self.started.set()
        if self.gate is not None:
            assert self.gate.wait(30), "the test never opened the gate"
        return self.inner(texts, *a, **kw)


def test_encode_keeps_the_principal_space_and_quantises_the_rest():
    rng = np.random.default_rng(0)
    low = rng.normal(size=(300, 8)) @ rng.normal(size=(8, 32))  # rank 8 in 32 dims
    x = (low / np.linalg.norm(low, axis=1, keepdims=True)).astype(np.float32)
    arrays = encode(x, dims=8, head=3)
    assert arrays["head"].dtype == np.float16 and arrays["tail"].dtype == np.int8
    assert arrays["basis"].shape == (8, 32) and arrays["tail"].shape == (300, 5)
    rebuilt = decode_z(arrays).astype(np.float32) @ arrays["basis"].astype(np.float32)
    rebuilt += arrays["mean"]
    assert np.abs(rebuilt - x).max() < 0.02  # rank 8: only quantisation is lost
    again = encode(x, dims=8, head=3)  # the same file from the same embeddings
    assert all(np.array_equal(arrays[k], again[k]) for k in arrays)


def _compact_bundle(tmp_path):
    """The tiny hubness bundle with its pool shipped compact: ``(bundle, photos, exact
    pool embeddings)``."""
    import vsekit

    bundle, photos = hubness_bundle(tmp_path)
    m = vsekit.load_model(str(bundle), backend="torch")
    caps = list(dict.fromkeys(m.captions))
    emb = m.encode_text(caps)
    write_compact(bundle, caps, emb, m.weights_fingerprint, m.hubness.text_penalty(emb),
                  m.hubness.text_key)  # fmt: skip
    return bundle, photos, emb


def test_a_shipped_pool_is_used_without_embedding_a_caption(tmp_path, monkeypatch):
    """Annotation and the hubness caption bank come from the bundle: no caption goes
    through the text encoder, nothing is cached, and the ranking is the computed one's."""
    import vsekit

    monkeypatch.setenv("VSEKIT_CACHE", str(tmp_path / "cache"))
    bundle, photos, _ = _compact_bundle(tmp_path)
    imgs = [str(p) for p in sorted(photos.iterdir())]
    monkeypatch.setenv("VSEKIT_CACHE", str(tmp_path / "cache-reference"))
    ref = vsekit.load_model(str(bundle), backend="torch")
    ref.pools._compact_info = False  # the reference: the pool computed through the text encoder
    want = ref.annotate(imgs, k=6)  # every caption, with its exact score
    want_pen = ref.image_penalty(ref.encode_image(imgs))
    monkeypatch.setenv("VSEKIT_CACHE", str(tmp_path / "cache"))

    m = vsekit.load_model(str(bundle), backend="torch")
    m.encode_text = Counting(m)
    assert m.caption_pool.on_disk() and m.caption_pool.compact is not None
    got = m.annotate(imgs, k=6)
    np.testing.assert_allclose(m.image_penalty(m.encode_image(imgs)), want_pen, atol=2e-3)
    assert m.encode_text.count == 0 and m.caption_pool.ready
    assert not (tmp_path / "cache" / "captions").exists()
    for g, w in zip(got, want, strict=True):  # the same ranking, up to near-ties
        exact = dict(w)
        np.testing.assert_allclose([exact[c] for c, _ in g], [s for _, s in w], atol=1e-3)
        np.testing.assert_allclose([s for _, s in g], [exact[c] for c, _ in g], atol=1e-3)


def test_a_damaged_or_foreign_compact_pool(tmp_path, monkeypatch):
    """A damaged npz is an error naming it; a json the manifest does not match fails
    the bundle's check; a pool made for other weights is not used (it is computed)."""
    import vsekit

    monkeypatch.setenv("VSEKIT_CACHE", str(tmp_path / "cache"))
    bundle, _, _ = _compact_bundle(tmp_path)
    npz = bundle / COMPACT_FILE
    good = npz.read_bytes()
    npz.write_bytes(good[:-9] + bytes([good[-9] ^ 1]) + good[-8:])
    with pytest.raises(ModelError, match=COMPACT_FILE):
        vsekit.load_model(str(bundle), backend="torch").caption_pool.prepare()
    npz.write_bytes(good)

    info = bundle / COMPACT_INFO
    meta = json.loads(info.read_text())
    info.write_text(json.dumps({**meta, "model_fingerprint": "0" * 16}))
    with pytest.raises(ModelError, match=COMPACT_INFO):
        verify_bundle(bundle)
    from vsekit.bundle import write_manifest

    write_manifest(bundle)  # a pool recorded for other weights: computed, not used
    m = vsekit.load_model(str(bundle), backend="torch")
    m.encode_text = Counting(m)
    m.caption_pool.prepare()
    assert m.caption_pool.compact is None and m.encode_text.count == len(m.caption_pool.captions)


def test_a_second_process_waits_for_the_first_ones_pool(tmp_path, monkeypatch):
    """Two models (as two processes would be) on one cache and a bundle without a
    compact pool: while the first embeds the hubness caption bank, the second's photo
    penalty waits on its lock file (its ``waiting`` event is the hook) and then reads its
    file: it embeds no caption itself, and gets the same penalties."""
    import vsekit

    monkeypatch.setenv("VSEKIT_CACHE", str(tmp_path / "cache"))
    bundle, photos = hubness_bundle(tmp_path)
    first = vsekit.load_model(str(bundle), backend="torch")
    second = vsekit.load_model(str(bundle), backend="torch")
    gate = threading.Event()
    first.encode_text = Counting(first, gate)
    second.encode_text = Counting(second)
    emb = first.encode_image([str(p) for p in sorted(photos.iterdir())])
    assert second.hubness is not None  # loaded; its caption bank is embedded lazily
    bank = second.pools.bank_pool
    out: dict = {}
    indexer = threading.Thread(target=lambda: out.setdefault("a", first.image_penalty(emb)))
    indexer.start()
    assert first.encode_text.started.wait(30)  # the indexer is embedding the bank
    searcher = threading.Thread(target=lambda: out.setdefault("b", second.image_penalty(emb)))
    searcher.start()
    assert bank.waiting.wait(30)  # the searcher waits on the indexer's lock file
    assert second.encode_text.count == 0
    gate.set()
    indexer.join(30)
    searcher.join(30)
    assert second.encode_text.count == 0 and first.encode_text.count > 0
    np.testing.assert_array_equal(out["a"], out["b"])


# ------------------------------------------------------------ the shipped default
SAMPLE = slice(5, None, 467)  # 64 captions spread over the pool


@pytest.fixture(scope="module")
def default_models():
    import vsekit

    shipped = vsekit.load_model("default")  # as it runs on this CPU
    if shipped.compact_pool is None:
        pytest.fail("the default bundle ships no compact caption pool that fits its weights")
    return shipped, vsekit.load_model("default", precision="fp32")


def test_the_default_pool_ships_and_matches_the_text_graph(default_models):
    """The shipped configuration against the reference: 64 pool captions through the
    fp32 text graph, the float32 embeddings the compact form was made from. Rebuilt rows,
    shipped penalties and scores on real photos agree with them."""
    from vsekit.runtime.compact import captions_key
    from vsekit.runtime.hubness import caption_bank_texts

    shipped, fp32 = default_models
    c = shipped.compact_pool
    pool = shipped.caption_pool
    assert captions_key(pool.captions) == json.loads(
        (shipped.path / COMPACT_INFO).read_text())["captions_sha256"]  # fmt: skip
    rows = np.arange(len(pool.captions))[SAMPLE]
    exact = fp32.encode_text([pool.captions[r] for r in rows])
    rebuilt = c.rows(rows)
    cos = np.sum(rebuilt * exact, 1)
    assert cos.min() > 0.975 and cos.mean() > 0.985  # 98.3% of the variance is kept
    hub = shipped.hubness
    assert c.penalty_key == hub.text_key  # the shipped penalties are the ones used
    np.testing.assert_allclose(c.penalty[rows], hub.text_penalty(exact), atol=1e-4)
    bank = caption_bank_texts(shipped.captions, hub.config.caption_stride)
    assert bank == pool.captions[:: hub.config.caption_stride]  # the bank is every 6th row
    img = shipped.encode_image([str(p) for p in shipped_photos()[:4]])
    coords, offset = c.project(img)
    got = coords @ np.asarray(c.z[rows], np.float32).T + offset[:, None]
    np.testing.assert_allclose(got, img @ exact.T, atol=0.01)


def test_default_annotation_and_penalties_embed_no_caption(default_models, tmp_path, monkeypatch):
    """A cold first annotation and a search's photo penalties with the shipped model:
    nothing goes through the text graph and nothing is written to the cache."""
    import vsekit

    monkeypatch.setenv("VSEKIT_CACHE", str(tmp_path / "cache"))
    m = vsekit.load_model("default")

    def refuse(*a, **kw):
        raise AssertionError("a caption went through the text graph")

    m.encode_text = refuse
    photo = str(shipped_photos()[0])
    best = m.annotate(photo, k=5)
    assert len(best) == 5 and all(isinstance(t, str) for t, _ in best)
    assert np.isfinite(m.image_penalty(m.encode_image([photo]))).all()
    assert not (tmp_path / "cache").exists()


def test_first_index_and_annotate_of_the_default_compute_no_caption(tmp_path, monkeypatch, capsys):
    """`vse index` then `vse annotate` from an empty cache with the shipped default: no
    caption bank or pool progress (nothing is embedded), nothing cached for captions."""
    import shutil

    from vsekit.cli import main

    monkeypatch.setenv("VSEKIT_CACHE", str(tmp_path / "cache"))
    photos = tmp_path / "photos"
    photos.mkdir()
    for p in shipped_photos()[:2]:
        shutil.copy2(p, photos / p.name)
    assert main(["index", str(photos), "--index", str(tmp_path / "idx"), "--quiet"]) == 0
    assert main(["annotate", str(photos / shipped_photos()[0].name), "--json"]) == 0
    out, err = capsys.readouterr()
    assert "caption" not in err, err
    assert len(json.loads(out[out.index("{") :])["captions"]) == 5
    assert not (tmp_path / "cache" / "captions").exists()
    # a later search reads every photo's stored penalty: the compact pool is not read
    import vsekit.runtime.pools as pools

    def unread(*a, **kw):
        raise AssertionError("the search read the compact caption pool")

    monkeypatch.setattr(pools, "read_compact", unread)
    assert main(["search", "a cat", "--index", str(tmp_path / "idx"), "--k", "2"]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 2


def test_the_service_annotates_from_a_shipped_pool_at_once(tmp_path, monkeypatch):
    """The first /annotate is a 200 (the pool is read in the request, never a 503 while
    nothing is computed); a damaged compact file is a 500 naming it."""
    from fastapi.testclient import TestClient

    import vsekit
    from vsekit.index import Collection, model_info
    from vsekit.serve.app import create_app

    monkeypatch.setenv("VSEKIT_CACHE", str(tmp_path / "cache"))
    bundle, photos, _ = _compact_bundle(tmp_path)

    def client():
        m = vsekit.load_model(str(bundle), backend="torch")
        m.encode_text = Counting(m)
        coll = Collection(tmp_path / "idx", model_info(m, "tiny"))
        coll.update(photos, m.encode_image, progress=False)
        return TestClient(create_app(coll, m), base_url="http://127.0.0.1"), m

    c, m = client()
    r = c.get("/annotate/1")
    assert r.status_code == 200 and len(r.json()["captions"]) == 5, r.text
    assert m.encode_text.count == 0
    npz = bundle / COMPACT_FILE
    data = npz.read_bytes()
    npz.write_bytes(data[:100] + bytes([data[100] ^ 1]) + data[101:])
    c, _ = client()
    r = c.get("/annotate/1")
    assert r.status_code == 500 and COMPACT_FILE in r.json()["error"], r.text
