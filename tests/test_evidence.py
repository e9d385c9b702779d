"""Evidence sources (vsekit.evidence): the WordNet -> ImageNet mapping shipped in the
default bundle, the scorer interface, and fused search against a naive reference."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vsekit.bundle import ModelError, bundle_dir
from vsekit.evidence import EvidenceScorer, PhotoBatch, fuse, load_sources
from vsekit.evidence.imagenet import ImageNetClasses, Sense, WordNetMap
from vsekit.evidence.store import evidence_bias, fill_evidence, read_evidence
from vsekit.index import Collection

DEFAULT = bundle_dir("default")
CORGIS = {"n02113023", "n02113186"}  # Pembroke, Cardigan Welsh corgi
GERMAN_SHEPHERD = "n02106662"


@pytest.fixture(scope="module")
def shipped() -> ImageNetClasses:
    """The shipped head and mapping, with fixed fusion settings (not the bundle's
    choice, which a new sweep may change): senses of at most 5 classes that cover at
    least a tenth of their WordNet leaves, no word gate."""
    src = [s for s in load_sources(DEFAULT, enabled_only=False) if s.name == "imagenet"]
    assert len(src) == 1
    s = src[0]
    fusion = {"weight": 1.0, "max_classes": 5, "min_coverage": 0.1}
    return ImageNetClasses(s.weight, s.bias, s.wordnet, s.feature_scale, s.top_k, fusion,
                           s.word_counts)  # fmt: skip


def wnids(src: ImageNetClasses, text: str) -> set[str]:
    return {src.wordnet.classes[c][0] for c in src.query_classes(text)}


# -- the mapping ----------------------------------------------------------------------
def test_corgi_names_exactly_the_two_corgi_classes(shipped):
    assert wnids(shipped, "a corgi") == CORGIS
    assert wnids(shipped, "two Corgis on the grass") == CORGIS  # plural, any case
    assert wnids(shipped, "german shepherd") == {GERMAN_SHEPHERD}  # a compound, one class


def test_a_general_word_does_not_fire_every_class_below_it(shipped):
    dog = shipped.wordnet.senses["dog"][0]
    assert len(dog.classes) >= 100  # dog spans the breeds ...
    assert not shipped.fires(dog)  # ... and is left to the text model
    assert wnids(shipped, "a dog") == set()
    assert wnids(shipped, "a person") == set()  # 3 classes, but a sliver of "person"
    assert wnids(shipped, "a corgi and a dog") == CORGIS  # the specific noun still fires


def test_the_word_count_gate_keeps_words_the_text_model_knows(shipped):
    src = ImageNetClasses(shipped.weight, shipped.bias, shipped.wordnet,
                          fusion={"max_word_count": 10, "max_classes": 5},
                          word_counts={"corgi": 3, "shirt": 1363})  # fmt: skip
    assert src.word_count("corgis") == 3  # the plural counts as its lemma
    assert wnids(src, "two corgis") == CORGIS
    assert wnids(src, "a man in a shirt") == set()  # seen 1,363 times: the text model's
    assert src.word_count("violin") == 0  # never seen: exactly where the classes help
    assert wnids(src, "a violin") == {"n04536866"}
    assert shipped.word_counts["corgi"] == 3  # read from the bundle's vocab.json


def test_by_length_scales_the_bonus_by_the_nouns_share_of_the_query(shipped):
    src = ImageNetClasses(shipped.weight, shipped.bias, shipped.wordnet,
                          fusion={"weight": 2.0, "max_classes": 5, "by_length": True})  # fmt: skip
    ev = {"classes": np.array([[263, 264], [1, 2]], np.uint16),  # the two corgis; fish
          "probs": np.array([[0.5, 0.25], [0.9, 0.1]], np.float16)}  # fmt: skip
    np.testing.assert_allclose(src.score("a corgi", ev), [1.5, 0.0])
    # 4 words besides the article: the corgi is a quarter of the query
    np.testing.assert_allclose(src.score("a corgi runs on grass", ev), [0.375, 0.0])


def test_rare_senses_and_compounds_do_not_fire(shipped):
    # "blue" the butterfly (sense 7, never tagged) is a class; "blue" the colour is not
    assert any(s.classes for s in shipped.wordnet.senses["blue"])
    assert wnids(shipped, "a man in a blue shirt") & {"n02281787"} == set()
    # "hot dog" is read as one noun: never the dog classes
    assert not wnids(shipped, "a hot dog") & CORGIS
    assert not any(len(s.classes) > 100 for _, ss in shipped.wordnet.phrases("a hot dog")
                   for s in ss)  # fmt: skip


def test_mapping_holds_1000_distinct_classes_in_the_classifier_order(shipped):
    cls = shipped.wordnet.classes
    assert len(cls) == 1000 and len({w for w, _ in cls}) == 1000
    assert cls[0][0] == "n01440764" and cls[999][0] == "n15075141"  # tench ... toilet tissue
    assert [w for w, _ in cls] == sorted(w for w, _ in cls)


# -- bundle files -----------------------------------------------------------------------
def test_absent_files_turn_the_source_off_and_damaged_ones_are_refused(tmp_path):
    cfg = {"imagenet": json.loads((DEFAULT / "evidence.json").read_text())["imagenet"]}
    b = tmp_path / "bundle"
    b.mkdir()
    (b / "evidence.json").write_text(json.dumps(cfg))
    assert load_sources(b, enabled_only=False) == []  # no files: off, no error
    for name in ("imagenet_wordnet.json", "imagenet_head.safetensors"):
        shutil.copy(DEFAULT / name, b / name)
    assert len(load_sources(b, enabled_only=False)) == 1
    cfg["imagenet"]["fusion"]["enabled"] = False
    (b / "evidence.json").write_text(json.dumps(cfg))
    assert load_sources(b) == []  # present but not enabled
    data = bytearray((b / "imagenet_head.safetensors").read_bytes())
    data[-1] ^= 1
    (b / "imagenet_head.safetensors").write_bytes(bytes(data))
    with pytest.raises(ModelError, match="sha256"):
        load_sources(b, enabled_only=False)


# -- the scorer interface ---------------------------------------------------------------
def tiny_source(weight: float = 1.0, top_k: int = 3) -> ImageNetClasses:
    """6 classes over 4 features; "corgi" names classes 0 and 1, "dog" all six."""
    rng = np.random.default_rng(0)
    classes = [(f"n{i:08d}", f"class {i}") for i in range(6)]
    senses = {"corgi": [Sense("1", (0, 1), 1.0, False)],
              "dog": [Sense("2", tuple(range(6)), 0.8, False)]}  # fmt: skip
    wn = WordNetMap(classes, senses)
    fusion = {"weight": weight, "max_classes": 2, "enabled": True}
    w, b = rng.normal(size=(6, 4)) * 3, rng.normal(size=6) * 0.1
    return ImageNetClasses(w, b, wn, feature_scale=2.0, top_k=top_k, fusion=fusion)


def naive_probs(src: ImageNetClasses, feats: np.ndarray) -> np.ndarray:
    out = []
    for f in feats:
        z = [float(np.dot(w, f * src.feature_scale) + b)
             for w, b in zip(src.weight, src.bias, strict=True)]  # fmt: skip
        e = np.exp(np.array(z) - max(z))
        out.append(e / e.sum())
    return np.array(out)


def test_imagenet_source_is_an_evidence_scorer_and_matches_a_naive_softmax():
    src = tiny_source()
    assert isinstance(src, EvidenceScorer)
    feats = np.random.default_rng(1).normal(size=(5, 4)).astype(np.float32)
    p = naive_probs(src, feats)
    ev = src.index(PhotoBatch(features=feats))
    assert ev["classes"].shape == ev["probs"].shape == (5, 3)
    assert ev["classes"].dtype == np.uint16 and ev["probs"].dtype == np.float16
    for i in range(5):
        want = np.argsort(-p[i], kind="stable")[:3]
        assert list(ev["classes"][i]) == list(want)
        np.testing.assert_allclose(ev["probs"][i], p[i][want], rtol=2e-3, atol=1e-4)
    # the bonus: weight x the stored mass on the named classes
    bonus = src.score("a corgi", ev)
    probs = ev["probs"].astype(np.float32)
    want = [sum(float(pr) for c, pr in zip(cs, ps, strict=True) if c in (0, 1))
            for cs, ps in zip(ev["classes"], probs, strict=True)]  # fmt: skip
    np.testing.assert_allclose(bonus, want, rtol=1e-6)
    assert src.score("a dog", ev) is None  # 6 classes > max_classes: nothing to say
    assert src.score("a beach", ev) is None


def test_fuse_adds_a_bonus_only_to_queries_that_name_a_class():
    src = tiny_source(weight=0.5)
    feats = np.random.default_rng(2).normal(size=(4, 4)).astype(np.float32)
    ev = {"imagenet": src.index(PhotoBatch(features=feats))}
    base = np.random.default_rng(3).normal(size=(3, 4)).astype(np.float32)
    texts = ["a corgi", "a beach", "a dog"]
    out = fuse(base, texts, [src], ev)
    np.testing.assert_allclose(out[0], base[0] + src.score("a corgi", ev["imagenet"]))
    np.testing.assert_array_equal(out[1:], base[1:])
    np.testing.assert_array_equal(fuse(base, texts, [src], {}), base)  # no stored evidence
    with pytest.raises(ValueError):
        fuse(base, texts[:2], [src], ev)


def test_shipped_head_on_the_models_own_features_names_the_cat_and_the_espresso(shipped):
    """The head on the bundle's unit features (scaled back by feature_scale) classifies
    scikit-image's cat as a cat class and its coffee as espresso, as the backbone's
    converted weights do on raw pool5."""
    skdata = pytest.importorskip("skimage.data")
    import vsekit

    model = vsekit.load_model("default")
    ims = [Image.fromarray(skdata.chelsea()), Image.fromarray(skdata.coffee())]
    ev = shipped.index(PhotoBatch(ims, featurise=model.image_features))
    top = [shipped.wordnet.classes[int(c)][0] for c in ev["classes"][:, 0]]
    assert top[0] in {"n02124075", "n02123045", "n02123159"}  # Egyptian, tabby, tiger cat
    assert top[1] == "n07920052"  # espresso
    assert float(ev["probs"][1, 0]) > 0.5


def test_shipped_head_ranks_a_photo_by_its_classes(shipped, flickr8k_slice_photos):
    """The shipped head on real features: its top class for a Flickr8k photo is one of
    the classes its top-5 probabilities hold, and the probabilities are a distribution."""
    import vsekit

    model = vsekit.load_model("default")
    feats = model.image_features([str(p) for p in flickr8k_slice_photos[:2]])
    ev = shipped.index(PhotoBatch(features=feats))
    p = shipped.class_probs(feats)
    np.testing.assert_allclose(p.sum(1), 1, rtol=1e-5)
    assert list(ev["classes"][:, 0]) == list(p.argmax(1))


# -- fused search ----------------------------------------------------------------------
def _photo(path: Path, rgb) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (20, 16), rgb).save(path)
    return path


def _pixel_features(paths) -> np.ndarray:
    return _pixel_features_of_images([Image.open(p) for p in paths])


def test_fused_search_matches_a_naive_reference(tmp_path):
    photos = tmp_path / "photos"
    colours = [(250, 5, 5), (5, 250, 5), (5, 5, 250), (200, 200, 20), (20, 200, 200),
               (120, 60, 200), (240, 240, 240)]  # fmt: skip
    for i, c in enumerate(colours):
        _photo(photos / f"p{i}.png", c)
    info = {"name": "pixels", "fingerprint": "feed", "dim": 4, "similarity": "cosine"}
    coll = Collection(tmp_path / "idx", info)
    coll.update(photos, _pixel_features_of_images, progress=False)
    snap = coll.snapshot
    src = tiny_source(weight=0.3)
    files = [(p, s, m) for p, (s, m) in zip(snap.paths, snap.stamps, strict=True)]
    assert fill_evidence(coll.path, files, src, _pixel_features_of_images) == len(colours)
    assert fill_evidence(coll.path, files, src, _pixel_features_of_images) == 0  # nothing new

    q = np.array([[0.6, 0.2, 0.7, 0.3]], np.float32)
    q /= np.linalg.norm(q)
    bias = evidence_bias(coll.path, snap, [src], "a corgi")
    hits = coll.search(q, k=len(colours), bias=bias, snap=snap)[0]

    # the reference: every photo's cosine plus weight x its top-3 mass on classes 0, 1
    probs = naive_probs(src, _pixel_features(snap.paths))
    ref = []
    for path, f, p in zip(snap.paths, _pixel_features(snap.paths), probs, strict=True):
        top = np.argsort(-p, kind="stable")[:3]
        ref.append((float(f @ q[0]) + 0.3 * sum(p[c] for c in top if c in (0, 1)), path))
    ref.sort(key=lambda t: -t[0])
    assert [h.path for h in hits] == [p for _, p in ref]
    np.testing.assert_allclose([h.score for h in hits], [s for s, _ in ref], atol=2e-3)
    # a query that names no class leaves the search exactly as the model's
    assert evidence_bias(coll.path, snap, [src], "a beach") is None
    # a changed photo loses its evidence until it is filled again
    _photo(photos / "p0.png", (10, 10, 10))
    coll.update(photos, _pixel_features_of_images, progress=False)
    snap2 = coll.snapshot
    b2 = evidence_bias(coll.path, snap2, [src], "a corgi")
    name = [snap2.paths[i] if i >= 0 else "" for i in snap2.row_to_pos]
    changed = [r for r in range(snap2.n_rows) if snap2.live[r] and name[r].endswith("p0.png")]
    assert b2[changed] == [0.0]
    files2 = [(p, s, m) for p, (s, m) in zip(snap2.paths, snap2.stamps, strict=True)]
    assert fill_evidence(coll.path, files2, src, _pixel_features_of_images) == 1
    assert len(read_evidence(coll.path, "imagenet")["paths"]) == len(colours)


def _pixel_features_of_images(images) -> np.ndarray:
    """4 features from pixel statistics (mean RGB, spread), unit length."""
    out = []
    for im in images:
        a = np.asarray(im.convert("RGB").resize((4, 4)), np.float32) / 255
        v = np.array([*a.reshape(-1, 3).mean(0), a.std()]) + 0.1
        out.append(v / np.linalg.norm(v))
    return np.asarray(out, np.float32)
