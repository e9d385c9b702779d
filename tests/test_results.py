"""Search results as a photo manager shows them: copies stacked into one result, a
relevance cue calibrated per model (``relevance.json`` in the bundle), and the viewer's
facts about a photo (``GET /photos/{id}``): library, CLI and HTTP."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from tests.conftest import make_tiny_model
from vsekit.bundle import ModelError, verify_bundle
from vsekit.index import Collection, model_info
from vsekit.index.snapshot import Hit
from vsekit.index.stacking import copy_groups, copy_ids, stack_hits
from vsekit.runtime.relevance import RELEVANCE_FILE, Relevance, read_relevance, write_relevance

CAPTIONS = ["a dog runs on grass", "a red car", "two people in the snow", "a red dog"]

#: left and right halves' colours: the six one-hot pairs, then pairs of two (cosine
#: 0.5 or 0.71 to the others: never near-duplicates at 0.88)
RED, GREEN, BLUE, BLACK = (255, 0, 0), (0, 255, 0), (0, 0, 255), (0, 0, 0)
HALVES = [(RED, BLACK), (GREEN, BLACK), (BLUE, BLACK), (BLACK, RED), (BLACK, GREEN),
          (BLACK, BLUE), (RED, RED), (GREEN, BLUE)]  # fmt: skip


LOW, HIGH = 40, 200  # a channel off / on: room for the texture on both sides


def halves(path: Path, left, right, size: int = 32, texture: int | None = None) -> Path:
    """A PNG whose left and right halves are solid colours (channels 0 / 255 drawn as
    LOW / HIGH), with, for a ``texture`` seed, a coarse grey pattern of zero mean in each
    half: it leaves :func:`colour_embed` as it is and gives each photo a perceptual hash
    of its own (plain halves would share one)."""
    px = np.zeros((size, size, 3), np.float32)
    px[:, : size // 2] = [HIGH if c else LOW for c in left]
    px[:, size // 2 :] = [HIGH if c else LOW for c in right]
    if texture is not None:
        rng = np.random.default_rng(texture)
        t = np.kron(rng.uniform(-38, 38, (8, 8)), np.ones((size // 8, size // 8)))
        for half in (slice(0, size // 2), slice(size // 2, size)):
            t[:, half] -= t[:, half].mean()
        px += t[:, :, None]
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.clip(np.round(px), 0, 255).astype(np.uint8)).save(path)
    return path


def colour_embed(images) -> np.ndarray:
    """``[n, 6]`` unit vectors: the mean colour of each half, less LOW (the tiny random
    model maps every photo to nearly one direction, so its embeddings cannot tell copies
    apart)."""
    out = []
    for im in images:
        a = np.asarray(im.convert("RGB").resize((2, 1), Image.Resampling.BOX), np.float32)
        v = np.maximum(a.reshape(-1) - LOW, 0)
        out.append(v / max(np.linalg.norm(v), 1e-6))
    return np.asarray(out, np.float32)


def channel_photos(photos: Path) -> list[Path]:
    """21 photos whose :func:`colour_embed` vectors are every set of one or two of the six
    (half, channel) axes: no two closer than cosine 0.71, each with its own texture."""
    from itertools import combinations

    out = []
    for n in (1, 2):
        for axes in combinations(range(6), n):
            c = [0] * 6
            for a in axes:
                c[a] = 255
            name = "".join("LR"[a // 3] + "rgb"[a % 3] for a in axes)
            out.append(halves(photos / f"{name}.png", tuple(c[:3]), tuple(c[3:]),
                              texture=len(out)))  # fmt: skip
    return out


def make_photos(root: Path) -> Path:
    """Eight distinct photos, an exact copy of the first (same bytes, another folder),
    a half-size copy of the second and a colour edit of the third (near-duplicates)."""
    photos = root / "photos"
    for i, (left, right) in enumerate(HALVES):
        halves(photos / f"p{i}.png", left, right, texture=i)
    (photos / "copies").mkdir()
    shutil.copy(photos / "p0.png", photos / "copies" / "p0 copy.png")
    with Image.open(photos / "p1.png") as im:
        im.resize((16, 16), Image.Resampling.LANCZOS).save(photos / "copies" / "p1 small.png")
    # a colour edit of the third: its embedding moves (cosine 0.94, under the embedding
    # stage's threshold), its perceptual hash barely does (the hash stage finds it)
    px = np.asarray(Image.open(photos / "p2.png")).astype(np.int16)
    px[:, : px.shape[1] // 2, 0] += 60
    Image.fromarray(np.clip(px, 0, 255).astype(np.uint8)).save(photos / "copies" / "p2 edit.png")
    return photos


@pytest.fixture
def bundle_and_index(tmp_path):
    """A tiny model's bundle and an index of :func:`make_photos`."""
    import vsekit

    bundle = make_tiny_model(CAPTIONS).save(tmp_path / "m")
    model = vsekit.load_model(str(bundle), backend="torch")
    photos = make_photos(tmp_path)
    coll = Collection(tmp_path / "idx", model_info(model, str(bundle)))
    coll.update(photos, colour_embed, progress=False)
    return bundle, coll, photos


def ids_by_name(coll: Collection) -> dict[str, int]:
    snap = coll.snapshot
    return {Path(p).name: int(i) for i, p in zip(snap.ids, snap.paths, strict=True)}


# ------------------------------------------------------------------ stacking
def test_copies_are_grouped_and_distinct_photos_are_not(bundle_and_index):
    _, coll, _ = bundle_and_index
    snap = coll.snapshot
    emb = colour_embed([Image.open(p) for p in snap.paths])
    by = ids_by_name(coll)
    # the precondition that makes the test mean something: the distinct photos are
    # all below the near-duplicate cosine, the resized copy above it
    from vsekit.index.duplicates import NEAR_THRESHOLD

    names = [Path(p).name for p in snap.paths]
    cos = emb @ emb.T
    distinct = [k for k, n in enumerate(names) if n.startswith("p") and " " not in n]
    sub = cos[np.ix_(distinct, distinct)] - 2 * np.eye(len(distinct))
    assert sub.max() < NEAR_THRESHOLD
    assert cos[names.index("p1.png"), names.index("p1 small.png")] >= NEAR_THRESHOLD
    assert cos[names.index("p2.png"), names.index("p2 edit.png")] < NEAR_THRESHOLD
    # every photo as a hit, in an order that puts copies apart
    order = ["p1 small.png", "p0.png", "p2.png", "p1.png", "p0 copy.png", "p3.png", "p2 edit.png"]
    hits = [Hit(by[n], snap.path_of(by[n]), 1.0 - 0.1 * k) for k, n in enumerate(order)]
    groups = copy_groups(snap, hits)
    assert [[order[i] for i in g] for g in groups] == [
        ["p1 small.png", "p1.png"], ["p0.png", "p0 copy.png"], ["p2.png", "p2 edit.png"],
        ["p3.png"]
    ]  # fmt: skip
    stacked = stack_hits(snap, hits)
    assert [Path(h.path).name for h in stacked] == ["p1 small.png", "p0.png", "p2.png", "p3.png"]
    assert [Path(c.path).name for c in stacked[0].copies] == ["p1.png"]
    assert [c.score for c in stacked[1].copies] == [hits[4].score]  # each copy keeps its own
    assert [Path(c.path).name for c in stacked[2].copies] == ["p2 edit.png"]  # by its hash
    assert stacked[3].copies == ()
    flat = copy_ids(snap, hits)  # the unstacked listing: every file keeps its place
    assert flat[1] == [by["p0 copy.png"]] and flat[4] == [by["p0.png"]] and flat[5] == []


def test_videos_are_never_stacked(bundle_and_index):
    _, coll, _ = bundle_and_index
    snap = coll.snapshot
    by = ids_by_name(coll)
    a, b = by["p0.png"], by["p0 copy.png"]
    hits = [Hit(a, snap.path_of(a), 0.9, 0.0, 2.0), Hit(b, snap.path_of(b), 0.8)]
    assert len(stack_hits(snap, hits)) == 2


def test_stacked_search_returns_k_stacks_and_fetches_past_copies(bundle_and_index):
    from vsekit.index.query import search_text

    bundle, coll, _ = bundle_and_index
    import vsekit

    model = vsekit.load_model(str(bundle), backend="torch")
    flat = search_text(coll, model, "a red car", k=11)
    assert len(flat) == 11  # 11 files
    stacked = search_text(coll, model, "a red car", k=10, stack=True)
    # 8 distinct photos: the three copies fold into their originals
    assert len(stacked) == 8 and sum(len(h.copies) for h in stacked) == 3
    assert {h.id for h in stacked} | {c.id for h in stacked for c in h.copies} == {
        h.id for h in flat
    }
    # k stacks, not k files: the first 3 stacks of the ranking
    top3 = search_text(coll, model, "a red car", k=3, stack=True)
    assert [h.id for h in top3] == [h.id for h in stacked[:3]]
    scores = [h.score for h in stacked]
    assert scores == sorted(scores, reverse=True)


# ------------------------------------------------------------------ relevance cue
def test_cue_thresholds():
    rel = Relevance(strong=0.25, weak=0.15)
    assert [rel.cue(s) for s in (0.4, 0.25, 0.2, 0.15, 0.1, -0.3)] == [
        "strong", "strong", "weak", "weak", "none", "none"]  # fmt: skip


def calibrate(bundle: Path, fingerprint: str, strong: float, weak: float, **extra) -> None:
    """``relevance.json`` for the fp32 graph of the model with ``fingerprint``, and the
    entries of ``extra`` (by precision)."""
    cal = {"strong": strong, "weak": weak, "model_fingerprint": fingerprint}
    write_relevance(bundle, {"by_precision": {"fp32": cal, **extra}, "rule": {},
                             "score": "test", "command": "test"})  # fmt: skip


def test_relevance_file_is_read_per_precision_verified_and_model_bound(tmp_path):
    import vsekit

    bundle = make_tiny_model(CAPTIONS).save(tmp_path / "m")
    fp = vsekit.load_model(str(bundle), backend="torch").fingerprint
    assert read_relevance(bundle, fp, "fp32") is None  # no calibration: no cue
    int8 = {"strong": 0.31, "weak": 0.12, "model_fingerprint": "1" * 16}
    calibrate(bundle, fp, 0.3, 0.1, int8=int8)
    assert read_relevance(bundle, fp, "fp32") == Relevance(0.3, 0.1)
    # each precision's entry holds for the model it was measured with (the image graph
    # is part of a fingerprint), and a precision without one gets no cue
    assert read_relevance(bundle, "1" * 16, "int8") == Relevance(0.31, 0.12)
    assert read_relevance(bundle, fp, "int8") is None
    assert read_relevance(bundle, "0" * 16, "fp32") is None  # calibrated for other weights
    assert read_relevance(bundle, fp, "bf16") is None
    verify_bundle(bundle)  # recorded in the manifest
    f = bundle / RELEVANCE_FILE
    f.write_text(f.read_text().replace("0.3", "0.2"))
    with pytest.raises(ModelError, match="relevance.json: damaged or edited"):
        verify_bundle(bundle)
    calibrate(bundle, fp, 0.1, 0.3)
    with pytest.raises(ValueError, match="weak threshold 0.3 above strong 0.1"):
        read_relevance(bundle, fp, "fp32")


def test_text_hits_carry_the_cue_image_hits_do_not(bundle_and_index):
    import vsekit
    from vsekit.index.query import search_image, search_text

    bundle, coll, photos = bundle_and_index
    model = vsekit.load_model(str(bundle), backend="torch")
    raw = [h.score for h in search_text(coll, model, "a red car", k=10)]
    assert all(h.cue is None for h in search_text(coll, model, "a red car", k=3))
    strong, weak = raw[2], raw[6]  # thresholds inside this ranking: all three cues occur
    calibrate(bundle, model.fingerprint, strong, weak)
    model = vsekit.load_model(str(bundle), backend="torch")
    hits = search_text(coll, model, "a red car", k=10)
    want = ["strong" if h.score >= strong else "weak" if h.score >= weak else "none"
            for h in hits]  # fmt: skip
    assert [h.cue for h in hits] == want and set(want) == {"strong", "weak", "none"}
    assert all(h.cue is None for h in search_image(coll, model, photos / "p2.png", k=3))
    # a query of photo terms alone is no sentence: no cue; one with a sentence has one
    pid = ids_by_name(coll)["p2.png"]
    assert all(h.cue is None for h in search_text(coll, model, f"#{pid}", k=3))
    mixed = search_text(coll, model, f'"a red car" + 0.5:#{pid}', k=3)
    assert all(h.cue is not None for h in mixed)


def calibrate_short(bundle: Path, fingerprint: str, sentence: tuple, short: tuple,
                    max_words: int = 4) -> None:  # fmt: skip
    """``relevance.json`` with a sentence pair and a short queries' pair (fp32)."""
    cal = {"strong": sentence[0], "weak": sentence[1], "model_fingerprint": fingerprint,
           "short": {"strong": short[0], "weak": short[1]}}  # fmt: skip
    write_relevance(bundle, {"by_precision": {"fp32": cal}, "rule": {}, "score": "test",
                             "command": "test",
                             "short_queries": {"max_words": max_words}})  # fmt: skip


def test_short_queries_are_read_with_the_short_pair(tmp_path):
    from vsekit.index.query import query_words

    assert [query_words(q) for q in ("a dog", "two young girls", "#12", '"a dog" + "beach"',
                                     "A dog's ball, in the snow.")] == [2, 3, 0, 3, 7]  # fmt: skip
    rel = Relevance(0.23, 0.15, short=Relevance(0.12, 0.07), short_words=4)
    # "a dog" (2 words) reads 0.14 as strong; a sentence, and a query of unknown length
    # (the sentence pair), as none
    assert rel.cue(0.14, query_words("a dog")) == "strong"
    assert rel.cue(0.10, 4) == "weak" and rel.cue(0.05, 1) == "none"
    assert rel.cue(0.14, query_words("a black dog runs across the grass")) == "none"
    assert rel.cue(0.14) == "none" and rel.cue(0.14, 5) == "none"
    assert rel.bands(2) == Relevance(0.12, 0.07) and rel.bands(0) is rel
    # the bundle file: the short pair and the boundary are read with the sentence pair
    bundle = make_tiny_model(CAPTIONS).save(tmp_path / "m")
    calibrate_short(bundle, "f" * 16, (0.23, 0.15), (0.12, 0.07))
    assert read_relevance(bundle, "f" * 16, "fp32") == rel
    verify_bundle(bundle)
    calibrate_short(bundle, "f" * 16, (0.23, 0.15), (0.07, 0.12))
    with pytest.raises(ValueError, match="weak threshold 0.12 above strong 0.07"):
        read_relevance(bundle, "f" * 16, "fp32")
    # a file from before the short pair: every query is read with the sentence pair
    calibrate(bundle, "f" * 16, 0.23, 0.15)
    old = read_relevance(bundle, "f" * 16, "fp32")
    assert old == Relevance(0.23, 0.15) and old.cue(0.14, 2) == "none"
    assert "short" not in json.loads((bundle / RELEVANCE_FILE).read_text())["by_precision"]["fp32"]


def test_cli_index_then_search_picks_the_pair_by_query_length(tmp_path, capsys):
    """``vse index`` then ``vse search``: a two-word query gets the short pair's cue, a
    sentence the sentence pair's; a bundle whose file has no short pair gives both the
    sentence pair's; ``--json`` keeps the raw score."""
    import vsekit
    from tests.conftest import write_image
    from vsekit.cli import main

    bundle = make_tiny_model(CAPTIONS).save(tmp_path / "m")
    fp = vsekit.load_model(str(bundle), backend="torch").fingerprint
    for i in range(4):
        write_image(tmp_path / "photos" / f"{i}.png", seed=i)
    idx = ["--index", str(tmp_path / "idx")]
    assert main(["index", str(tmp_path / "photos"), "--model", str(bundle), *idx,
                 "--quiet"]) == 0  # fmt: skip
    capsys.readouterr()
    short, long = "a dog", "a red dog runs on the grass in the snow"

    def cues(query: str) -> list[str]:
        assert main(["search", query, "--k", "4", "--no-stack", *idx]) == 0
        return [line.split()[0] for line in capsys.readouterr().out.splitlines()]

    # every score is a strong match for a short query, no match for a sentence
    calibrate_short(bundle, fp, (10.0, 10.0), (-10.0, -10.0))
    assert cues(short) == ["strong"] * 4
    assert cues(long) == ["none"] * 4
    assert cues(f'"{short}" + "red"') == ["strong"] * 4  # 3 words in all: short
    assert main(["search", short, "--k", "4", "--json", *idx]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert len(hits) == 4 and {h["cue"] for h in hits} == {"strong"}
    assert all(isinstance(h["score"], float) and abs(h["score"]) < 10 for h in hits)
    calibrate(bundle, fp, 10.0, 10.0)  # an old file: no short pair
    assert cues(short) == ["none"] * 4 and cues(long) == ["none"] * 4


# ------------------------------------------------------------------ CLI
def test_cli_stacks_for_reading_and_lists_every_file_in_json(bundle_and_index, capsys):
    import vsekit
    from vsekit.cli import main

    bundle, coll, _ = bundle_and_index
    model = vsekit.load_model(str(bundle), backend="torch")
    calibrate(bundle, model.fingerprint, 10.0, -10.0)  # every hit a weak match
    idx = str(coll.path)
    assert main(["search", "a red car", "--index", idx, "--k", "10"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 8 and all(line.startswith("weak ") for line in lines)
    assert sum("(+1 copy)" in line for line in lines) == 3
    assert main(["search", "a red car", "--index", idx, "--k", "10", "--no-stack"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 10 and not any("copy)" in line for line in lines)
    assert main(["search", "a red car", "--index", idx, "--k", "11", "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert len(hits) == 11 and {h["cue"] for h in hits} == {"weak"}
    by = ids_by_name(coll)
    got = {Path(h["path"]).name: h["copies"] for h in hits}
    assert got["p0.png"] == [by["p0 copy.png"]] and got["p0 copy.png"] == [by["p0.png"]]
    assert got["p1 small.png"] == [by["p1.png"]] and got["p2.png"] == [by["p2 edit.png"]]
    assert got["p3.png"] == []
    assert all(isinstance(h["score"], float) for h in hits)  # the raw score stays


# ------------------------------------------------------------------ HTTP
def test_http_results_stack_with_cues_and_copies(bundle_and_index):
    import vsekit
    from vsekit.serve.app import create_app

    bundle, coll, _ = bundle_and_index
    model = vsekit.load_model(str(bundle), backend="torch")
    calibrate(bundle, model.fingerprint, 10.0, -10.0)
    model = vsekit.load_model(str(bundle), backend="torch")
    client = TestClient(create_app(coll, model), base_url="http://127.0.0.1")
    q = {"q": "a red car", "k": 10, "stack": "true"}  # as the page asks
    res = client.get("/search", params=q).json()["results"]
    assert len(res) == 8 and {r["cue"] for r in res} == {"weak"}
    stacks = {frozenset([r["name"], *(c["name"] for c in r["copies"])]) for r in res}
    assert {s for s in stacks if len(s) > 1} == {
        frozenset(["p0.png", "p0 copy.png"]),
        frozenset(["p1.png", "p1 small.png"]),
        frozenset(["p2.png", "p2 edit.png"]),
    }
    head = next(r for r in res if r["copies"])
    assert all(c["score"] <= head["score"] for c in head["copies"])  # the best one shows
    copy = head["copies"][0]
    by_photo = client.get("/search", params={"q": f"#{copy['id']}", "k": 3}).json()
    assert [r["cue"] for r in by_photo["results"]] == [None] * 3  # photo terms alone
    assert copy["thumb"] == f"/thumbs/{copy['id']}" and "score" in copy
    flat = client.get("/search", params={"q": "a red car", "k": 10}).json()  # the default
    assert len(flat["results"]) == 10 and all(r["copies"] == [] for r in flat["results"])


def test_photo_facts_endpoint(tmp_path):
    """Date, camera, place and size (pixels as shown, bytes) from the index."""
    import vsekit
    from tests.test_filters import exif_photo
    from vsekit.serve.app import create_app

    bundle = make_tiny_model(CAPTIONS).save(tmp_path / "m")
    model = vsekit.load_model(str(bundle), backend="torch")
    photos = tmp_path / "photos"
    exif_photo(photos / "a.jpg", 1)  # Canon EOS 5D, 2019-02-15, New York
    exif_photo(photos / "b.jpg", 5)  # no date (dated by its mtime), no camera, no place
    im = Image.new("RGB", (40, 20), (9, 9, 9))  # stored sideways: shown 20 x 40
    exif = Image.Exif()
    exif[0x0112] = 6
    im.save(photos / "turned.jpg", exif=exif)
    coll = Collection(tmp_path / "idx", model_info(model, str(bundle)))
    coll.update(photos, colour_embed, progress=False)
    client = TestClient(create_app(coll, model), base_url="http://127.0.0.1")
    by = ids_by_name(coll)
    a = client.get(f"/photos/{by['a.jpg']}").json()
    assert a["taken"] == "2019-02-15T10:00:00" and a["taken_from"] == "exif"
    assert a["camera"] == "Canon EOS 5D"
    assert a["lat"] == pytest.approx(40.6892, abs=1e-3)
    assert a["lon"] == pytest.approx(-74.0445, abs=1e-3)
    assert a["map"].startswith("https://www.openstreetmap.org/?mlat=40.689")
    assert (a["width"], a["height"]) == (24, 24)
    assert a["bytes"] == (photos / "a.jpg").stat().st_size and a["path"] == "photos/a.jpg"
    b = client.get(f"/photos/{by['b.jpg']}").json()
    assert b["taken_from"] == "mtime" and b["taken"].startswith("2017-07-14")
    assert b["camera"] is None and b["lat"] is None and b["map"] is None
    t = client.get(f"/photos/{by['turned.jpg']}").json()
    assert (t["width"], t["height"]) == (20, 40) and t["camera"] is None
    assert client.get("/photos/99999").status_code == 404
    (photos / "a.jpg").unlink()
    assert client.get(f"/photos/{by['a.jpg']}").status_code == 404  # gone since indexed
