"""The colour evidence source (vsekit.evidence.colour): pixel naming and region shares on
synthetic images, the query's colour words, the bonus and its fusion, the stored
evidence through a real index, and the selection rule of benchmarks/colour_evidence.py
on crafted figures."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vsekit.evidence import EvidenceScorer, PhotoBatch, fuse, load_sources
from vsekit.evidence.colour import (
    COLOURFUL,
    COLOURS,
    MONOCHROME,
    REGIONS,
    ColourNames,
    colour_shares,
    colour_terms,
    name_pixels,
    normalise,
    term_values,
    word_share,
)
from vsekit.evidence.store import evidence_bias, fill_evidence, read_evidence

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from colour_evidence import BAR, choose  # noqa: E402

I = {c: i for i, c in enumerate(COLOURS)}  # noqa: E741


def solid(rgb, size=(40, 30)) -> Image.Image:
    return Image.new("RGB", size, rgb)


# -- pixels -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "rgb, name",
    [((255, 0, 0), "red"), ((200, 20, 30), "red"), ((255, 128, 0), "orange"),
     ((255, 255, 0), "yellow"), ((0, 128, 0), "green"), ((30, 200, 60), "green"),
     ((0, 0, 255), "blue"), ((0, 0, 128), "blue"), ((64, 224, 208), "blue"),
     ((128, 0, 128), "purple"), ((120, 60, 200), "purple"), ((255, 192, 203), "pink"),
     ((255, 105, 180), "pink"), ((139, 69, 19), "brown"), ((210, 180, 140), "brown"),
     ((128, 128, 128), "grey"), ((10, 10, 10), "black"), ((250, 250, 250), "white"),
     ((40, 0, 0), "black")],
)  # fmt: skip
def test_pixels_are_named_by_the_documented_rules(rgb, name):
    assert COLOURS[int(name_pixels(np.array(rgb, np.uint8)))] == name


@pytest.mark.parametrize("name", ["red", "blue", "white", "black", "green", "pink"])
def test_a_solid_photo_is_all_its_colour_in_every_region(name):
    rgb = {"red": (230, 10, 10), "blue": (20, 40, 220), "white": (245, 245, 245),
           "black": (5, 5, 5), "green": (20, 160, 40), "pink": (255, 170, 200)}[name]  # fmt: skip
    s = colour_shares(solid(rgb))
    assert s.shape == (len(REGIONS), len(COLOURS))
    np.testing.assert_allclose(s[:, I[name]], 1.0, atol=1e-6)
    np.testing.assert_allclose(s.sum(1), 1.0, atol=1e-5)


def test_regions_see_where_the_colour_is():
    # a red patch in the top-left quarter of a grey photo
    a = np.full((64, 64, 3), 128, np.uint8)
    a[:32, :32] = (230, 10, 10)
    s = colour_shares(Image.fromarray(a))
    r = dict(zip(REGIONS, s[:, I["red"]], strict=True))
    assert r["whole"] == pytest.approx(0.25, abs=0.01)
    assert r["top_left"] == pytest.approx(1.0, abs=0.01)
    assert r["top_right"] == r["bottom_left"] == r["bottom_right"] == 0
    # a patch in the centre weighs more in the centre-weighted region than in the whole
    b = np.full((64, 64, 3), 128, np.uint8)
    b[24:40, 24:40] = (20, 40, 220)
    s = colour_shares(Image.fromarray(b))
    assert s[1, I["blue"]] > 2 * s[0, I["blue"]] > 0


def test_index_reads_pixels_only_and_stores_float16(tmp_path):
    src = ColourNames({"weight": 1.0})
    assert isinstance(src, EvidenceScorer)
    paths = []
    for i, rgb in enumerate([(230, 10, 10), (20, 40, 220)]):
        paths.append(tmp_path / f"{i}.png")
        solid(rgb).save(paths[-1])

    def no_model(_):
        raise AssertionError("the colour source must not run the backbone")

    ev = src.index(PhotoBatch(paths=paths, featurise=no_model))
    assert ev["shares"].shape == (2, len(REGIONS), len(COLOURS))
    assert ev["shares"].dtype == np.float16
    assert ev["shares"][0, 0, I["red"]] == 1 and ev["shares"][1, 0, I["blue"]] == 1
    assert src.index(PhotoBatch(images=[]))["shares"].shape == (0, len(REGIONS), len(COLOURS))
    with pytest.raises(ValueError, match="pixels"):
        src.index(PhotoBatch(features=np.zeros((1, 4))))


# -- words -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, terms",
    [("a red car", ["red"]), ("a girl in a pink dress", ["pink"]),
     ("man in a blue shirt", ["blue"]), ("a dog on gray rocks", ["grey"]),
     ("a woman dressed in purple", ["purple"]), ("a tan dog", ["brown"]),
     ("a reddish-brown dog", ["red", "brown"]), ("black and white dog", ["black", "white"]),
     ("a black and white photo of a street", [MONOCHROME]),
     ("black & white picture", [MONOCHROME]), ("people in colorful costumes", [COLOURFUL]),
     ("a red-haired girl", []), ("a white-haired man in a Red shirt", ["red"]),
     ("a black man", []), ("a blonde woman", []), ("a dog runs on the beach", []),
     ("RED CAR, red car", ["red"]), ("navy blue jacket", ["blue"])],
)  # fmt: skip
def test_colour_words_of_a_query(text, terms):
    assert colour_terms(text) == terms


def test_word_share_counts_only_the_colour_words_that_count():
    assert word_share("a red car") == pytest.approx(1 / 2)
    assert word_share("a man in a blue shirt") == pytest.approx(1 / 4)
    assert word_share("a black man in a red shirt") == pytest.approx(1 / 5)
    assert word_share("a dog") == 0


# -- the bonus ------------------------------------------------------------------------------------
def shares_of(*rows) -> np.ndarray:
    """``[N, regions, colours]`` with each photo's given {colour: share} in every region."""
    out = np.zeros((len(rows), len(REGIONS), len(COLOURS)), np.float32)
    for n, r in enumerate(rows):
        for c, v in r.items():
            out[n, :, I[c]] = v
        out[n, :, I["grey"]] += 1 - sum(r.values())
    return out


def test_score_is_none_without_a_colour_word_or_weight():
    ev = {"shares": shares_of({"red": 0.5}, {})}
    assert ColourNames({"weight": 1.0}).score("a dog on a beach", ev) is None
    assert ColourNames({"weight": 0.0}).score("a red car", ev) is None


def test_raw_bonus_is_weight_times_share_and_several_colours_average():
    ev = {"shares": shares_of({"red": 0.5}, {"red": 0.1, "white": 0.3}, {})}
    src = ColourNames({"weight": 0.2, "region": "whole", "norm": "raw"})
    np.testing.assert_allclose(src.score("a red car", ev), [0.1, 0.02, 0.0], atol=1e-6)
    np.testing.assert_allclose(src.score("red and white", ev), [0.05, 0.04, 0.0], atol=1e-6)
    by_len = ColourNames({"weight": 0.2, "norm": "raw", "by_length": True})
    np.testing.assert_allclose(by_len.score("a red car", ev), [0.05, 0.01, 0.0], atol=1e-6)


def test_z_norm_asks_for_more_white_than_the_collection_has():
    # white backgrounds everywhere: 0.6 of white is ordinary, 0.9 stands out
    ev = {"shares": shares_of({"white": 0.6}, {"white": 0.6}, {"white": 0.9}, {"white": 0.3})}
    z = ColourNames({"weight": 1.0, "norm": "z"}).score("a white dog", ev)
    assert z[2] > 0 and z[3] < 0 and abs(z[0]) < 1e-6
    assert np.all(np.abs(z) <= 3)
    r = normalise(np.array([0.1, 0.5, 0.5, 0.9]), "rank")
    np.testing.assert_allclose(r, [-0.5, 0.0, 0.0, 0.5])
    assert normalise(np.array([0.4]), "rank").tolist() == [0.0]
    assert normalise(np.array([0.4, 0.4]), "z").tolist() == [0.0, 0.0]


def test_monochrome_needs_every_quadrant_grey_and_cell_takes_the_best_quadrant():
    s = np.zeros((2, len(REGIONS), len(COLOURS)), np.float32)
    s[0, :, I["grey"]] = 0.7
    s[0, :, I["black"]] = 0.3  # a black-and-white photo
    s[1, :, I["white"]] = 1.0
    s[1, 2, :] = 0
    s[1, 2, I["red"]] = 1.0  # one red quadrant
    np.testing.assert_allclose(term_values(s, MONOCHROME, "whole"), [1.0, 0.0])
    np.testing.assert_allclose(term_values(s, "red", "cell"), [0.0, 1.0])
    np.testing.assert_allclose(term_values(s, COLOURFUL, "cell"), [0.0, 1.0])
    with pytest.raises(ValueError):
        term_values(s, "red", "corner")
    with pytest.raises(ValueError):
        ColourNames({"norm": "softmax"})


def test_fuse_adds_nothing_to_a_colourless_query():
    ev = {"colour": {"shares": shares_of({"red": 0.8}, {"blue": 0.5}, {})}}
    src = ColourNames({"weight": 0.3, "norm": "z", "region": "mix", "by_length": True})
    base = np.random.default_rng(0).normal(size=(3, 3)).astype(np.float32)
    texts = ["a red car", "a dog on the beach", "three children"]
    out = fuse(base, texts, [src], ev)
    np.testing.assert_array_equal(out[1:], base[1:])  # exactly, not approximately
    np.testing.assert_allclose(out[0], base[0] + src.score("a red car", ev["colour"]))
    assert out[0, 0] > base[0, 0]


# -- bundle and index ------------------------------------------------------------------------------
def test_a_colour_entry_needs_no_files_and_is_off_unless_enabled(tmp_path):
    b = tmp_path / "bundle"
    b.mkdir()
    cfg = {"colour": {"rules": 1, "fusion": {"weight": 0.1, "region": "cell", "norm": "z",
                                             "enabled": False}}}  # fmt: skip
    (b / "evidence.json").write_text(json.dumps(cfg))
    assert load_sources(b) == []
    (src,) = load_sources(b, enabled_only=False)
    assert (src.name, src.region, src.norm, src.fusion_weight) == ("colour", "cell", "z", 0.1)
    cfg["colour"]["fusion"]["enabled"] = True
    (b / "evidence.json").write_text(json.dumps(cfg))
    assert [s.name for s in load_sources(b)] == ["colour"]


def test_evidence_through_an_index_boosts_the_red_photo(tmp_path):
    from vsekit.index import Collection

    photos = tmp_path / "photos"
    photos.mkdir()
    colours = {"red": (230, 10, 10), "blue": (20, 40, 220), "white": (245, 245, 245)}
    for name, rgb in colours.items():
        solid(rgb).save(photos / f"{name}.png")

    def embed(images) -> np.ndarray:  # every photo alike: only the evidence can rank
        return np.tile(np.array([[1.0, 0.0, 0.0, 0.0]], np.float32), (len(images), 1))

    info = {"name": "flat", "fingerprint": "flat", "dim": 4, "similarity": "cosine"}
    coll = Collection(tmp_path / "idx", info)
    coll.update(photos, embed, progress=False)
    snap = coll.snapshot
    files = [(p, s, m) for p, (s, m) in zip(snap.paths, snap.stamps, strict=True)]
    src = ColourNames({"weight": 0.5, "norm": "raw"})
    assert fill_evidence(coll.path, files, src) == 3  # no model: pixels only
    assert read_evidence(coll.path, "colour")["shares"].shape == (3, len(REGIONS), len(COLOURS))
    q = np.array([[1.0, 0.0, 0.0, 0.0]], np.float32)
    hits = coll.search(q, k=3, bias=evidence_bias(coll.path, snap, [src], "a red car"), snap=snap)
    assert Path(hits[0][0].path).name == "red.png"
    assert hits[0][0].score == pytest.approx(1.5, abs=1e-3)
    assert evidence_bias(coll.path, snap, [src], "a car on a road") is None


def test_evidence_made_by_another_version_is_made_again_and_never_scored(tmp_path):
    """Shares stored by other pixel rules (another ``version``) add nothing to a search
    and are recomputed by the next fill."""
    from vsekit.evidence.store import stored_version
    from vsekit.index import Collection

    photos = tmp_path / "photos"
    photos.mkdir()
    for name, rgb in {"red": (230, 10, 10), "blue": (20, 40, 220)}.items():
        solid(rgb).save(photos / f"{name}.png")
    info = {"name": "flat", "fingerprint": "flat", "dim": 4, "similarity": "cosine"}
    coll = Collection(tmp_path / "idx", info)
    coll.update(photos, lambda ims: np.tile(np.eye(4, dtype=np.float32)[:1], (len(ims), 1)),
                progress=False)  # fmt: skip
    snap = coll.snapshot
    files = [(p, s, m) for p, (s, m) in zip(snap.paths, snap.stamps, strict=True)]
    old = ColourNames({"weight": 0.5, "norm": "raw"})
    assert fill_evidence(coll.path, files, old) == 2
    assert set(stored_version(read_evidence(coll.path, "colour"))) == {old.version}
    new = ColourNames({"weight": 0.5, "norm": "raw"})
    new.version = old.version + 1  # the rules changed
    assert not evidence_bias(coll.path, snap, [new], "a red car").any()  # stale: nothing
    assert fill_evidence(coll.path, files, new) == 2  # made again, all of them
    assert set(stored_version(read_evidence(coll.path, "colour"))) == {new.version}
    assert evidence_bias(coll.path, snap, [new], "a red car").max() > 0


# -- the selection rule --------------------------------------------------------------------------
BEFORE = {"scoreboard": {"p@5": 0.50, "ndcg@10": 0.60}, "caption_colours": {"ndcg@10": 0.40},
          "captions_t2i": {"r_sum": 290.0}}  # fmt: skip


def row(weight, p5, nd, cnd, rsum) -> dict:
    return {"weight": weight, "scoreboard": {"p@5": p5, "ndcg@10": nd},
            "caption_colours": {"ndcg@10": cnd}, "captions_t2i": {"r_sum": rsum}}  # fmt: skip


def test_the_rule_enables_a_setting_that_pays_on_both_sets():
    rows = [row(0.1, 0.50, 0.605, 0.41, 290.0), row(0.2, 0.52, 0.61, 0.43, 290.5)]
    pick = choose(rows, BEFORE)
    assert pick["enabled"] and pick["best"]["weight"] == 0.2
    assert pick["gain"] == pytest.approx(0.04) and pick["admissible"] == 2


def test_the_rule_keeps_it_off_under_the_bar():
    pick = choose([row(0.1, 0.50, 0.603, 0.405, 290.0)], BEFORE)
    assert pick["gain"] == pytest.approx(0.008) and pick["gain"] < BAR
    assert not pick["enabled"] and "< 0.01" in pick["why"]


def test_the_rule_keeps_it_off_when_one_set_falls_however_large_the_sum():
    pick = choose([row(0.1, 0.50, 0.59, 0.50, 290.0)], BEFORE)  # scoreboard nDCG falls
    assert pick["gain"] == pytest.approx(0.09)
    assert not pick["enabled"] and "scoreboard falls" in pick["why"]


def test_the_rule_never_picks_a_setting_that_costs_p5_or_caption_recall():
    rows = [row(0.5, 0.48, 0.70, 0.60, 291.0),  # P@5 falls: large gain, inadmissible
            row(1.0, 0.55, 0.70, 0.60, 289.9),  # caption recall falls
            row(0.05, 0.50, 0.605, 0.41, 290.0)]  # fmt: skip
    pick = choose(rows, BEFORE)
    assert pick["best"]["weight"] == 0.05 and pick["admissible"] == 1
    assert pick["enabled"] is True  # 0.015 >= 0.01 and neither falls
    none = choose(rows[:2], BEFORE)
    assert none["best"] is None and none["enabled"] is False and none["admissible"] == 0


def test_the_rule_breaks_ties_towards_the_lower_weight():
    rows = [row(0.3, 0.5, 0.62, 0.42, 290.0), row(0.1, 0.5, 0.62, 0.42, 290.0)]
    assert choose(rows, BEFORE)["best"]["weight"] == 0.1


# -- vse index + vse search ------------------------------------------------------------------------
FUSION = {"weight": 0.1, "region": "cell", "norm": "raw", "by_length": True, "enabled": True}


def _count_decodes(monkeypatch) -> list[str]:
    """The paths every photo decode of an index update reads from, in order."""
    from vsekit.media import images as media_images

    decoded: list[str] = []
    real = media_images.load_image

    def counting(src, reduce_to=None):
        decoded.append(str(src))
        return real(src, reduce_to)

    monkeypatch.setattr(media_images, "load_image", counting)
    monkeypatch.setattr("vsekit.index.update.load_image", counting)
    return decoded


def _colour_bundle(tmp_path: Path) -> tuple[Path, dict, Path]:
    """A tiny model's bundle with the colour source on, its fusion, an empty photo folder."""
    from tests.conftest import make_tiny_model

    bundle = make_tiny_model().save(tmp_path / "bundle")
    (bundle / "evidence.json").write_text(json.dumps({"colour": {"rules": 1, "fusion": FUSION}}))
    photos = tmp_path / "photos"
    photos.mkdir()
    return bundle, FUSION, photos


def test_vse_index_stores_colour_evidence_and_vse_search_adds_it(tmp_path, capsys):
    from tests.conftest import write_image
    from vsekit.cli import main

    bundle, fusion, photos = _colour_bundle(tmp_path)
    colours = {"red": (230, 10, 10), "blue": (20, 40, 220), "white": (245, 245, 245)}
    for name, rgb in colours.items():
        solid(rgb, (32, 32)).save(photos / f"{name}.png")
    for i in range(3):
        write_image(photos / f"noise{i}.jpg", seed=i)
    idx = tmp_path / "idx"
    assert main(["index", str(photos), "--model", str(bundle), "--index", str(idx), "--quiet"]) == 0
    capsys.readouterr()
    ev = read_evidence(idx, "colour")
    assert ev is not None and len(ev["paths"]) == 6

    def search(q: str) -> dict[str, float]:
        assert main(["search", q, "--index", str(idx), "--k", "6", "--json"]) == 0
        return {Path(h["path"]).name: h["score"] for h in json.loads(capsys.readouterr().out)}

    with_red, with_plain = search("a red car"), search("a dog runs on grass")
    (idx / "evidence" / "colour.npz").rename(tmp_path / "colour.npz")  # the model alone
    without_red, without_plain = search("a red car"), search("a dog runs on grass")
    # a query with no colour word: exactly the model's ranking and scores
    assert list(with_plain.items()) == list(without_plain.items())
    # "a red car": the red photo gains weight x (colour words' share: 1 of 2) x its red share
    assert with_red["red.png"] - without_red["red.png"] == pytest.approx(0.1 * 0.5, abs=1e-4)
    for name in ("blue.png", "white.png"):
        assert with_red[name] == pytest.approx(without_red[name], abs=1e-6)
    assert next(iter(with_red)) == "red.png"


def test_vse_index_decodes_each_photo_once_for_evidence(tmp_path, monkeypatch, capsys):
    """The evidence of the photos an update embeds comes from the pixels it decoded
    (the update's tap): fill_evidence decodes none of them again, and stores the same
    arrays a decode of its own gives."""
    from tests.conftest import write_image
    from vsekit.cli import main

    bundle, fusion, photos = _colour_bundle(tmp_path)
    for i in range(5):
        write_image(photos / f"p{i}.jpg", seed=i, size=64)
    decoded = _count_decodes(monkeypatch)
    idx = tmp_path / "idx"
    assert main(["index", str(photos), "--model", str(bundle), "--index", str(idx), "--quiet"]) == 0
    capsys.readouterr()
    assert sorted(decoded) == sorted(str(p) for p in photos.iterdir())  # once each
    ev = read_evidence(idx, "colour")
    assert ev is not None and len(ev["paths"]) == 5
    again = ColourNames(fusion).index(PhotoBatch(paths=list(ev["paths"]), decode_size=None))
    for k, v in again.items():
        assert np.allclose(ev[k], v, atol=1e-3), k


def test_the_cue_reads_the_score_without_the_evidence_bonus(tmp_path, capsys):
    """The relevance thresholds are calibrated on the model's scores: the colour bonus
    moves a photo up the ranking, not up the cue."""
    import vsekit
    from tests.test_results import calibrate
    from vsekit.cli import main

    bundle, _, photos = _colour_bundle(tmp_path)
    solid((230, 10, 10), (32, 32)).save(photos / "red.png")
    solid((20, 40, 220), (32, 32)).save(photos / "blue.png")
    idx = tmp_path / "idx"
    assert main(["index", str(photos), "--model", str(bundle), "--index", str(idx), "--quiet"]) == 0
    capsys.readouterr()

    def red_hit() -> dict:
        assert main(["search", "a red car", "--index", str(idx), "--k", "2", "--json"]) == 0
        return next(h for h in json.loads(capsys.readouterr().out) if h["path"].endswith("red.png"))

    with_bonus = red_hit()["score"]
    model_only = with_bonus - 0.1 * 0.5  # weight x the colour words' share x red's share 1
    fp = vsekit.load_model(str(bundle), backend="torch").fingerprint
    # strong lies between the model's score and the score with the bonus
    calibrate(bundle, fp, (model_only + with_bonus) / 2, model_only - 1.0)
    assert red_hit()["cue"] == "weak"
    calibrate(bundle, fp, model_only - 0.001, model_only - 1.0)
    assert red_hit()["cue"] == "strong"


def test_an_upgraded_index_decodes_each_photo_once_for_hashes_and_evidence(
    tmp_path, monkeypatch, capsys
):
    """An index from before crop hashes and before the colour source: the next `vse
    index` backfills both from one decode of each photo (the backfill shows its pixels
    to the update's tap)."""
    import sqlite3

    from tests.conftest import write_image
    from vsekit.cli import main

    bundle, _, photos = _colour_bundle(tmp_path)
    for i in range(4):
        write_image(photos / f"p{i}.jpg", seed=i, size=64)
    idx = tmp_path / "idx"
    assert main(["index", str(photos), "--model", str(bundle), "--index", str(idx), "--quiet"]) == 0
    capsys.readouterr()
    db = sqlite3.connect(idx / "index.sqlite")
    db.execute("UPDATE photo_meta SET phash_crops = NULL")
    db.commit()
    db.close()
    (idx / "evidence" / "colour.npz").unlink()
    decoded = _count_decodes(monkeypatch)
    assert main(["index", str(photos), "--model", str(bundle), "--index", str(idx), "--quiet"]) == 0
    capsys.readouterr()
    assert sorted(decoded) == sorted(str(p) for p in photos.iterdir())  # once each
    ev = read_evidence(idx, "colour")
    assert ev is not None and len(ev["paths"]) == 4
