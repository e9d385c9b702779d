"""Videos in the product: indexed per segment beside photos, searched down to the
moment, annotated, served (byte ranges, frame thumbnails) and played by the web page."""

from __future__ import annotations

import io
import json
import os
import time

import numpy as np
import pytest
from PIL import Image

from tests.conftest import make_tiny_model, write_image
from tests.media import write_video
from vsekit.index import Collection, CollectionError, model_info
from vsekit.media.video import frame_at

pytest.importorskip("av")

CAPTIONS = ["a dog runs on grass", "a red car", "two people in the snow", "a boat"]


def pattern(seed: int, size=(64, 48)) -> Image.Image:
    """A blocky random pattern: distinct per seed, and it survives video compression."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 255, (3, 4, 3), dtype=np.uint8)
    return Image.fromarray(small).resize(size, Image.NEAREST)


@pytest.fixture
def media(tmp_path):
    """Two photos and two videos. ``clip.webm`` shows pattern 10 for 2 s, 11 for 2 s,
    then 12 for 2 s (segments of 2 s: 0-2, 2-4, 4-6)."""
    root = tmp_path / "media"
    write_image(root / "p0.jpg", seed=0, size=48)
    write_image(root / "p1.jpg", seed=1, size=48)
    write_video(root / "clip.webm", [pattern(10), pattern(11), pattern(12)], seconds_each=2.0)
    write_video(root / "sub" / "other.webm", [pattern(20), pattern(21)], seconds_each=2.0)
    return root


def build(tmp_path, media, model=None):
    model = model or make_tiny_model(CAPTIONS)
    coll = Collection(tmp_path / "idx", model_info(model, "tiny"))
    rep = coll.update(media, model.encode_image, progress=False, reduce_to=model.decode_size)
    return coll, model, rep


def test_videos_are_indexed_per_segment_and_found_at_the_right_time(tmp_path, media):
    coll, model, rep = build(tmp_path, media)
    assert rep.added == 4 and not rep.failed and len(coll) == 4
    vid = next(i for i, p in zip(coll.ids, coll.paths, strict=True) if p.endswith("clip.webm"))
    assert coll.segments_of(vid) == [(0.0, 2.0), (2.0, 4.0), (4.0, 6.0)]
    assert coll.n_rows == 4 + 3 + 2  # a row per file, plus one per video segment
    for seed, start in ((10, 0.0), (11, 2.0), (12, 4.0)):
        top = coll.search(model.encode_image(pattern(seed)), k=4)[0]
        assert top[0].path.endswith("clip.webm") and top[0].start == start, top
        assert len({h.id for h in top}) == 4  # each file once, by its best row
    # the whole-clip row: the unit mean of the frames' embeddings
    frames = [pattern(s) for s in (10, 10, 11, 11, 12, 12)]
    want = model.encode_image(frames).mean(0)
    np.testing.assert_allclose(coll.embedding_of(vid), want / np.linalg.norm(want), atol=0.05)
    # photos carry no time
    photo = coll.search(model.encode_image(str(media / "p1.jpg")), k=1)[0][0]
    assert photo.path.endswith("p1.jpg") and photo.start is None


def test_search_gives_k_distinct_files_equal_to_a_naive_ranking(tmp_path, media):
    coll, model, _ = build(tmp_path, media)
    q = model.encode_text("a dog runs on grass")
    emb = np.asarray(coll.emb)
    naive = {}
    for r in range(coll.n_rows):
        pos = coll.row_to_pos[r]
        naive[pos] = max(naive.get(pos, -np.inf), float(emb[r] @ q))
    order = sorted(naive, key=lambda p: -naive[p])
    for k in (1, 2, 3, 4):
        got = coll.search(q, k=k)[0]
        assert [coll.paths[p] for p in order[:k]] == [h.path for h in got]
        np.testing.assert_allclose([h.score for h in got], [naive[p] for p in order[:k]], rtol=1e-5)
        assert all(h.start is not None for h in got if h.path.endswith(".webm"))


def test_incremental_video_update_delete_compact_and_repair(tmp_path, media):
    coll, model, _ = build(tmp_path, media)
    rep = coll.update(media, model.encode_image, progress=False)
    assert rep.unchanged == 4 and rep.embedded == 0
    # a changed video is re-embedded: its segments are replaced, not added to
    clip = media / "clip.webm"
    write_video(clip, [pattern(12), pattern(10)], seconds_each=2.0)
    os.utime(clip, ns=(time.time_ns(), time.time_ns() + 10**9))
    rep = coll.update(media, model.encode_image, progress=False)
    assert rep.updated == 1
    vid = coll.ids[coll.paths.index(str(clip))]
    assert coll.segments_of(vid) == [(0.0, 2.0), (2.0, 4.0)]
    assert coll.search(model.encode_image(pattern(10)), k=1)[0][0].start == 2.0
    # a deleted video takes its segments with it
    (media / "sub" / "other.webm").unlink()
    coll.update(media, model.encode_image, progress=False)
    n_seg = coll.db.execute("SELECT COUNT(*) FROM segments").fetchone()[0]
    assert n_seg == 2 and len(coll) == 3
    # compaction (7 dead rows, 5 live) renumbers segment rows with their files
    assert coll.n_rows == 12 and coll.compact(min_garbage=0)
    assert coll.n_rows == 3 + 2
    hit = coll.search(model.encode_image(pattern(10)), k=1)[0][0]
    assert hit.path == str(clip) and hit.start == 2.0
    # a damaged index (two segments on one row) is refused, and repair re-embeds the video
    coll.db.execute("UPDATE segments SET row = (SELECT row FROM files LIMIT 1)")
    coll.db.commit()
    with pytest.raises(CollectionError, match="share an embedding row"):
        Collection(tmp_path / "idx")
    fixed = Collection(tmp_path / "idx", repair=True)
    rep = fixed.update(media, model.encode_image, progress=False)
    assert rep.added >= 1 and fixed.segments_of(fixed.ids[fixed.paths.index(str(clip))])


def test_a_kill_while_indexing_videos_leaves_a_usable_index(tmp_path, media):
    model = make_tiny_model(CAPTIONS)
    coll = Collection(tmp_path / "idx", model_info(model, "tiny"))

    class Kill(Exception):
        pass

    def die(done):
        if done >= 1:
            raise Kill

    with pytest.raises(Kill):
        coll.update(media, model.encode_image, batch_size=1, progress=False, on_batch=die)
    again = Collection(tmp_path / "idx")  # opens: every committed row exists
    again.update(media, model.encode_image, progress=False)
    assert len(again) == 4
    assert again.search(model.encode_image(pattern(11)), k=1)[0][0].start == 2.0


def test_a_corrupt_video_is_reported_and_the_rest_indexed(tmp_path, media):
    (media / "broken.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"junk" * 50)
    coll, _, rep = build(tmp_path, media)
    assert len(coll) == 4
    assert [p for p, _ in rep.failed] == [str(media / "broken.mp4")]


def test_cli_index_search_and_annotate_a_video(tmp_path, media, capsys):
    from vsekit.cli import main

    bundle = make_tiny_model(CAPTIONS).save(tmp_path / "bundle")
    idx = tmp_path / "idx"
    assert main(["index", str(media), "--index", str(idx), "--model", str(bundle), "--quiet"]) == 0
    pattern(11).save(tmp_path / "q.png")
    capsys.readouterr()
    assert (
        main(["search", "--image", str(tmp_path / "q.png"), "--index", str(idx), "--k", "2"]) == 0
    )
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith("clip.webm  [0:02.0-0:04.0]"), first
    assert main(["search", "a boat", "--index", str(idx), "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert {"start", "end"} <= set(hits[0]) and len(hits) == 4
    assert main(["annotate", str(media / "clip.webm"), "--model", str(bundle), "--json"]) == 0
    ann = json.loads(capsys.readouterr().out)
    model = make_tiny_model(CAPTIONS)
    want = model.caption_pool.best(model.encode_video(media / "clip.webm").clip[None], 5)[0]
    assert [c["text"] for c in ann["captions"]] == [c for c, _ in want]
    assert model.annotate(str(media / "clip.webm"))[0][0] == want[0][0]


# ------------------------------------------------------------------ service
@pytest.fixture
def served(tmp_path, media):
    coll, model, _ = build(tmp_path, media)
    return coll, model, media


def test_service_video_hits_ranges_and_frame_thumbnails(served):
    from fastapi.testclient import TestClient

    from vsekit.serve.app import create_app

    coll, model, media = served
    client = TestClient(create_app(coll, model), base_url="http://127.0.0.1")
    res = client.get("/search", params={"q": "a boat", "k": 4}).json()["results"]
    clip = next(r for r in res if r["name"] == "clip.webm")
    assert clip["video"] is True and clip["start"] in (0.0, 2.0, 4.0)
    assert clip["thumb"] == f"/thumbs/{clip['id']}?t={clip['start']:g}"
    photo = next(r for r in res if r["name"] == "p0.jpg")
    assert photo["video"] is False and "start" not in photo
    whole = (media / "clip.webm").read_bytes()
    r = client.get(f"/images/{clip['id']}")
    assert r.status_code == 200 and r.content == whole and r.headers["accept-ranges"] == "bytes"
    r = client.get(f"/images/{clip['id']}", headers={"Range": "bytes=100-199"})
    assert r.status_code == 206 and r.content == whole[100:200]
    assert r.headers["content-range"] == f"bytes 100-199/{len(whole)}"
    r = client.get(f"/images/{clip['id']}", headers={"Range": "bytes=-50"})
    assert r.status_code == 206 and r.content == whole[-50:]
    r = client.get(f"/images/{clip['id']}", headers={"Range": f"bytes={len(whole)}-"})
    assert r.status_code == 416 and "outside the file" in r.json()["error"]
    assert client.get(f"/images/{clip['id']}", headers={"Range": "lines=1-2"}).status_code == 416
    # the thumbnail of t=3 s is the frame shown then (pattern 11), not the first one
    thumb = Image.open(io.BytesIO(client.get(f"/thumbs/{clip['id']}?t=3").content))
    want = np.asarray(frame_at(media / "clip.webm", 3.0).resize(thumb.size), np.float32)
    first = np.asarray(frame_at(media / "clip.webm", 0.5).resize(thumb.size), np.float32)
    got = np.asarray(thumb, np.float32)
    assert np.abs(got - want).mean() < 10 < np.abs(got - first).mean()
    ann = client.get(f"/annotate/{clip['id']}").json()
    assert len(ann["captions"]) == 4


@pytest.mark.slow
def test_browser_plays_a_video_hit_from_its_segment(served, tmp_path):
    """Real headless Chromium: search, see the video card with its time, open it, and the
    player plays from the best segment's start."""
    from tests.test_serve import browser_page
    from vsekit.serve.app import create_app

    coll, model, _ = served
    autoplay = ("--autoplay-policy=no-user-gesture-required",)
    with browser_page(create_app(coll, model), autoplay) as page:
        page.fill("#q", "a boat")
        page.press("#q", "Enter")
        page.wait_for_selector(".card")
        hits = page.evaluate("fetch('/search?k=4&q=a%20boat').then(r => r.json())")["results"]
        clip = next(r for r in hits if r["name"] == "clip.webm")
        card = page.locator(f".card[data-id='{clip['id']}']")
        assert "▶ 0:0" in card.inner_text()
        card.click()
        page.wait_for_function(
            "() => { const v = document.getElementById('player');"
            " return !v.hidden && v.readyState >= 2 && v.currentTime > 0; }",
            timeout=15000,
        )
        t = page.evaluate("document.getElementById('player').currentTime")
        assert clip["start"] - 0.05 <= t <= clip["end"] + 1.0, (t, clip)
        assert page.locator("#full").is_hidden()
        assert "clip.webm at" in page.inner_text("#fname")
        page.screenshot(path=str(tmp_path / "video.png"))


def test_without_the_video_extra_videos_are_reported_not_indexed(tmp_path, media, monkeypatch):
    import vsekit.index.scan as scan

    monkeypatch.setattr(scan, "video_support", lambda: False)
    coll, _, rep = build(tmp_path, media)
    assert len(coll) == 2  # the photos
    skipped = dict(rep.failed)
    assert set(skipped) == {str(media / "clip.webm"), str(media / "sub" / "other.webm")}
    assert all("pip install 'vsekit[video]'" in why for why in skipped.values())
