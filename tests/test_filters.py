"""EXIF filters: what is read from photos, and filtered searches equal to a naive
filter-then-rank, with exactly k results whenever k files match (exact and FAISS)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.test_index import DIM, INFO, CountingEmbedder
from vsekit.index import Collection
from vsekit.index.filters import Filters, parse_date
from vsekit.media.exif import read_meta

CAMERAS = [("Google", "Pixel 7"), ("Canon", "EOS 5D"), (None, None)]
PLACES = [(48.8584, 2.2945), (40.6892, -74.0445), None]


def exif_photo(path: Path, i: int) -> Path:
    """Photo ``i``: a colour of its own; a date in 2018-2021 (none for every 5th, which
    is dated by its mtime, set to 2017); a camera and a place by ``i``."""
    rng = np.random.default_rng(i)
    im = Image.fromarray(rng.integers(0, 255, (24, 24, 3), dtype=np.uint8))
    exif = Image.Exif()
    make, model = CAMERAS[i % 3]
    if make:
        exif[271], exif[272] = make, model
    if i % 5:
        exif.get_ifd(0x8769)[36867] = f"{2018 + i % 4}:{1 + i % 12:02d}:15 10:00:00"
    place = PLACES[i % 3]
    if place:
        gps = exif.get_ifd(0x8825)
        gps[1], gps[3] = ("N" if place[0] >= 0 else "S"), ("E" if place[1] >= 0 else "W")
        for tag, v in ((2, abs(place[0])), (4, abs(place[1]))):
            d, m = int(v), int((v - int(v)) * 60)
            gps[tag] = (float(d), float(m), round((v - d - m / 60) * 3600, 2))
    path.parent.mkdir(parents=True, exist_ok=True)
    im.save(path, exif=exif)
    t = 1_500_000_000  # 2017-07-14
    os.utime(path, (t, t))
    return path


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    root = tmp_path_factory.mktemp("exif")
    for i in range(40):
        exif_photo(root / "photos" / f"{i:02d}.jpg", i)
    coll = Collection(root / "idx", INFO)
    coll.update(root / "photos", CountingEmbedder(), progress=False)
    return coll


def test_exif_is_read_and_mtime_is_the_fallback(tmp_path):
    p = exif_photo(tmp_path / "a.jpg", 1)
    m = read_meta(p, p.stat().st_mtime_ns)
    assert (m.taken, m.taken_from, m.make, m.model) == ("2019-02-15T10:00:00", "exif", "Canon",
                                                         "EOS 5D")  # fmt: skip
    assert m.lat == pytest.approx(40.6892, abs=1e-3) and m.lon == pytest.approx(-74.0445, abs=1e-3)
    p = exif_photo(tmp_path / "b.jpg", 5)  # no date: the file's mtime, marked
    m = read_meta(p, p.stat().st_mtime_ns)
    assert m.taken_from == "mtime" and m.taken.startswith("2017-07-1")
    (tmp_path / "c.mp4").write_bytes(b"not an image")
    assert read_meta(tmp_path / "c.mp4", 0).taken_from == "mtime"


@pytest.mark.parametrize(
    "text,want",
    [("2019", "2019-01-01"), ("2019-06", "2019-06-01"), ("2019-6", "2019-06-01"),
     ("2019-06-30", "2019-06-30")],
)  # fmt: skip
def test_dates_name_the_day_their_period_starts(text, want):
    assert parse_date(text, "after") == want


def test_before_a_year_excludes_that_year(indexed):
    """`--after 2018 --before 2019` is 2018 only, by the photos' own EXIF dates (written
    by exif_photo: year 2018 + i % 4, none for every 5th)."""
    snap = indexed.snapshot
    keep = Filters.parse(after="2018", before="2019").files(snap)
    got = {Path(p).name for p, k in zip(snap.paths, keep, strict=True) if k}
    assert got == {f"{i:02d}.jpg" for i in range(40) if i % 5 and i % 4 == 0}
    keep = Filters.parse(after="2019-06", before="2019-07").files(snap)
    got = {Path(p).name for p, k in zip(snap.paths, keep, strict=True) if k}
    assert got == {f"{i:02d}.jpg" for i in range(40) if i % 5 and i % 4 == 1 and i % 12 == 5}


@pytest.mark.parametrize(
    "kw,msg",
    [({"after": "June"}, "after: 'June' is not a date"), ({"before": "2019-02-30"}, "before"),
     ({"after": "2020", "before": "2019"}, "is not before"), ({"after": "2019", "before": "2019"},
     "is not before"), ({"near": "48.8"}, "near"),
     ({"near": "91,0,5"}, "near")],
)  # fmt: skip
def test_bad_filters_name_the_field(kw, msg):
    with pytest.raises(ValueError, match=msg):
        Filters.parse(**kw)


def naive(coll: Collection, q: np.ndarray, f: Filters, k: int) -> list[str]:
    snap = coll.snapshot
    meta = snap.photo_meta
    out = []
    for pos, path in enumerate(snap.paths):
        t = meta["taken"][pos]
        if f.after and not (t and t >= f.after) or f.before and not (t and t < f.before):
            continue
        cam = f"{meta['make'][pos] or ''} {meta['model'][pos] or ''}".lower()
        if f.camera and f.camera not in cam:
            continue
        if f.near:
            lat, lon = meta["lat"][pos], meta["lon"][pos]
            if lat is None or abs(lat - f.near[0]) > 0.5 or abs(lon - f.near[1]) > 0.5:
                continue
        out.append((-float(snap.emb[snap.rows[pos]] @ q), path))
    return [p for _, p in sorted(out)[:k]]


FILTERS = [
    {"after": "2019-06"},
    {"before": "2019"},
    {"after": "2018-03", "before": "2020-07-15"},
    {"camera": "pixel"},
    {"camera": "CANON eos", "after": "2019"},
    {"near": "48.86,2.29,5"},
    {"near": "40.69,-74.04,5", "before": "2021"},
    {"after": "2017-07", "before": "2017-08"},  # the mtime-dated ones
    {"before": "2019-06"},
]


@pytest.mark.parametrize("method", ["exact", "faiss"])
@pytest.mark.parametrize("kw", FILTERS, ids=[str(f) for f in FILTERS])
def test_filtered_search_equals_filter_then_rank(indexed, kw, method):
    f = Filters.parse(**kw)
    rng = np.random.default_rng(0)
    for k in (1, 3, 8, 40):
        q = rng.normal(size=DIM).astype(np.float32)
        q /= np.linalg.norm(q)
        want = naive(indexed, q, f, k)
        hits = indexed.search(q[None], k, method, filters=f)[0]
        assert [h.path for h in hits] == want, (kw, k)
        assert len(hits) == min(k, int(f.files(indexed.snapshot).sum()))  # exactly k
    assert 0 < int(f.files(indexed.snapshot).sum()) < len(indexed)


def test_faiss_filtered_search_falls_back_when_the_inverted_file_misses(tmp_path):
    """An IVF index visits few lists: a filter that keeps rows outside them must still
    return k results (ranked exactly among the filtered rows)."""
    from vsekit.index.search import FaissSearcher
    from vsekit.topk import exact_search

    rng = np.random.default_rng(0)
    emb = rng.normal(size=(4000, 8)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    fs = FaissSearcher(emb, nlist=64, nprobe=1)
    allowed = np.zeros(4000, bool)
    allowed[rng.choice(4000, 30, replace=False)] = True
    q = emb[:3]
    s, r = fs.search(q, 10, allowed)
    assert ((r >= 0).sum(1) < 10).any()  # the miss is real
    from vsekit.index.search import search_snapshot

    class Snap:  # the little of a snapshot search_snapshot reads
        live = np.ones(4000, bool)
        segment_rows: dict = {}

        def __init__(self):
            self.emb = emb

        def __len__(self):
            return 4000

        def hits(self, scores, rows, k):
            return [(int(r), float(x)) for x, r in zip(scores, rows, strict=True) if r >= 0][:k]

        def with_best_segment(self, h, *a):
            return h

    got = search_snapshot(Snap(), q, 10, "faiss", faiss=lambda: fs, allowed=allowed)
    ws, wr = exact_search(emb, q, 10, allowed)
    assert [[r for r, _ in g] for g in got] == wr.tolist()


def test_metadata_lost_by_a_kill_is_backfilled(indexed, tmp_path):
    import shutil

    shutil.copytree(indexed.path, tmp_path / "idx")
    db = sqlite3.connect(tmp_path / "idx" / "index.sqlite")
    with db:
        db.execute("DELETE FROM photo_meta WHERE file_id % 2 = 0")  # as if killed mid-way
    db.close()
    coll = Collection(tmp_path / "idx", INFO)
    f = Filters.parse(camera="pixel")
    assert f.files(coll.snapshot).sum() < f.files(indexed.snapshot).sum()
    folder = Path(indexed.paths[0]).parent
    emb = CountingEmbedder()
    coll.update(folder, emb, progress=False)
    assert emb.seen == 0  # nothing re-embedded: only the headers re-read
    assert f.files(coll.snapshot).sum() == f.files(indexed.snapshot).sum()


def test_cli_and_service_filter_alike(indexed, capsys, tmp_path):
    import json

    from fastapi.testclient import TestClient

    from tests.conftest import make_tiny_model
    from vsekit.cli import main
    from vsekit.index import model_info
    from vsekit.serve.app import create_app

    model = make_tiny_model()
    bundle = model.save(tmp_path / "m")
    folder = Path(indexed.paths[0]).parent
    idx = tmp_path / "idx2"
    assert main(["index", str(folder), "--index", str(idx), "--model", str(bundle),
                 "--quiet"]) == 0  # fmt: skip
    capsys.readouterr()
    argv = ["search", "a dog", "--index", str(idx), "--k", "5", "--json", "--camera", "pixel",
            "--after", "2019"]  # fmt: skip
    assert main(argv) == 0
    cli = [h["path"] for h in json.loads(capsys.readouterr().out)]
    assert 0 < len(cli) <= 5
    coll = Collection(idx, model_info(model, "tiny"))
    client = TestClient(create_app(coll, model), base_url="http://127.0.0.1")
    r = client.get("/search", params={"q": "a dog", "k": 5, "camera": "pixel", "after": "2019"})
    assert r.status_code == 200
    assert [Path(h["path"]).name for h in r.json()["results"]] == [Path(p).name for p in cli]
    r = client.get("/search", params={"q": "a dog", "after": "2019-13"})
    assert r.status_code == 400 and r.json()["error"].startswith("after:")
    assert main([*argv[:-2], "--after", "someday"]) == 2
    assert "after: 'someday' is not a date" in capsys.readouterr().err


def test_backfill_of_a_file_that_cannot_be_read_ends(tmp_path):
    """A file indexed from another folder and gone since: its metadata cannot be read;
    the update still ends (it is tried once a run), and the rest is backfilled."""
    import threading

    a, b = tmp_path / "a", tmp_path / "b"
    exif_photo(a / "1.jpg", 1)
    exif_photo(b / "2.jpg", 2)
    coll = Collection(tmp_path / "idx", INFO)
    coll.update(a, CountingEmbedder(), progress=False)
    coll.update(b, CountingEmbedder(), progress=False)
    with coll.db:
        coll.db.execute("DELETE FROM photo_meta")  # an index from before metadata
    (b / "2.jpg").unlink()  # indexed, gone, outside the folder updated next
    done = threading.Event()
    t = threading.Thread(target=lambda: (coll.update(a, CountingEmbedder(), progress=False),
                                         done.set()))  # fmt: skip
    t.start()
    t.join(timeout=30)
    assert done.is_set(), "the update never ended"
    meta = dict(zip(coll.snapshot.paths, coll.snapshot.photo_meta["taken_from"], strict=True))
    assert meta[str(a / "1.jpg")] == "exif" and meta[str(b / "2.jpg")] == "mtime"


def test_filters_on_an_index_without_metadata_say_what_to_do(indexed, tmp_path):
    import shutil

    shutil.copytree(indexed.path, tmp_path / "idx")
    db = sqlite3.connect(tmp_path / "idx" / "index.sqlite")
    with db:
        db.execute("DROP TABLE photo_meta")  # an index from before metadata, opened read-only
    db.close()
    coll = Collection(tmp_path / "idx", INFO)
    with pytest.raises(ValueError, match="run `vse index FOLDER` once"):
        coll.search(np.ones((1, DIM), np.float32), 3, filters=Filters.parse(camera="pixel"))
    assert len(coll.search(np.ones((1, DIM), np.float32), 3)[0]) == 3  # unfiltered: fine


def test_search_by_image_takes_the_filters_too(indexed, tmp_path):
    import io

    from fastapi.testclient import TestClient

    from tests.conftest import make_tiny_model
    from vsekit.index import model_info
    from vsekit.serve.app import create_app

    model = make_tiny_model()
    folder = Path(indexed.paths[0]).parent
    coll = Collection(tmp_path / "idx", model_info(model, "tiny"))
    coll.update(folder, model.encode_image, progress=False)
    client = TestClient(create_app(coll, model), base_url="http://127.0.0.1")
    buf = io.BytesIO()
    Image.open(folder / "01.jpg").save(buf, "PNG")
    files = {"file": ("q.png", buf.getvalue(), "image/png")}
    r = client.post("/search/image", files=files, params={"k": 40, "camera": "pixel"})
    want = {Path(p).name for p, k in zip(coll.snapshot.paths, Filters.parse(camera="pixel")
                                         .files(coll.snapshot), strict=True) if k}  # fmt: skip
    assert r.status_code == 200 and {h["name"] for h in r.json()["results"]} == want
    r = client.post("/search/image", files=files, params={"after": "June"})
    assert r.status_code == 400 and r.json()["error"].startswith("after:")
