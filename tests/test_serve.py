"""HTTP API (FastAPI test client) and one end-to-end test in a real headless Chromium."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import socket
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from tests.conftest import make_tiny_model, write_image
from vsekit.index import Collection, model_info
from vsekit.index.query import MAX_QUERY_CHARS
from vsekit.serve.app import create_app
from vsekit.serve.routers.media import THUMB_SIZE

CAPTIONS = ["a dog runs on grass", "a red car", "two people in the snow", "a red dog"]


@pytest.fixture
def served(tmp_path):
    model = make_tiny_model(CAPTIONS)
    photos = tmp_path / "photos"
    for i in range(6):
        write_image(photos / f"p{i}.jpg", seed=i, size=48)
    coll = Collection(tmp_path / "idx", model_info(model, "tiny"))
    coll.update(photos, model.encode_image, progress=False)
    return coll, model, photos


@pytest.fixture
def client(served):
    coll, model, _ = served
    return TestClient(create_app(coll, model), base_url="http://127.0.0.1")


def jpeg_bytes(seed: int = 0) -> bytes:
    buf = io.BytesIO()
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 255, (40, 40, 3), dtype=np.uint8)).save(buf, "JPEG")
    return buf.getvalue()


def test_health_and_page(client):
    r = client.get("/health")
    from vsekit.runtime.precision import cpu_info

    got = r.json()
    assert r.status_code == 200 and got.pop("precision")["image"] == "fp32"  # torch: fp32
    assert got == {"status": "ok", "images": 6, "model": "tiny", "cpu": cpu_info().int8_class}
    page = client.get("/")
    assert page.status_code == 200 and 'id="q"' in page.text and 'id="drop"' in page.text
    assert "/search/image" in client.get("/openapi.json").json()["paths"]


def test_search_matches_the_library(client, served):
    coll, model, _ = served
    r = client.get("/search", params={"q": "a red car", "k": 4})
    assert r.status_code == 200
    res = r.json()["results"]
    from vsekit.index.query import search_text

    expect = search_text(coll, model, "a red car", 4)
    assert [x["id"] for x in res] == [h.id for h in expect]
    assert [x["score"] for x in res] == sorted((x["score"] for x in res), reverse=True)
    thumb = client.get(res[0]["thumb"])
    assert thumb.status_code == 200 and thumb.headers["content-type"] == "image/jpeg"
    assert max(Image.open(io.BytesIO(thumb.content)).size) <= THUMB_SIZE
    full = client.get(res[0]["image"])
    _, _, photos = served
    assert res[0]["path"] == f"photos/{res[0]['name']}"  # relative to its folder, no abs path
    assert full.content == (photos / res[0]["name"]).read_bytes()


def test_search_by_image_and_annotate(client, served):
    _, model, photos = served
    data = (photos / "p3.jpg").read_bytes()
    r = client.post("/search/image", files={"file": ("q.jpg", data, "image/jpeg")}, params={"k": 2})
    assert r.status_code == 200
    assert r.json()["results"][0]["name"] == "p3.jpg"  # itself first
    r = client.post("/annotate", files={"file": ("q.jpg", data, "image/jpeg")}, params={"k": 3})
    caps = r.json()["captions"]
    assert r.status_code == 200 and len(caps) == 3 and {c["text"] for c in caps} <= set(CAPTIONS)
    first_id = client.get("/search", params={"q": "dog"}).json()["results"][0]["id"]
    assert client.get(f"/annotate/{first_id}").json()["captions"]


@pytest.mark.parametrize(
    ("params", "status", "field"),
    [
        ({"q": ""}, 422, "q"),
        ({"q": "   "}, 400, "query"),
        ({"q": "x" * (MAX_QUERY_CHARS + 1)}, 422, "q"),
        ({"q": "dog", "k": 0}, 422, "k"),
        ({"q": "dog", "k": 100000}, 422, "k"),
        ({"q": "dog", "k": "many"}, 422, "k"),
        ({}, 422, "q"),
    ],
)
def test_bad_queries_are_4xx_json(client, params, status, field):
    r = client.get("/search", params=params)
    assert r.status_code == status and r.json()["error"].startswith(field)


def test_bad_uploads_and_ids_are_4xx_json(client, monkeypatch):
    r = client.post("/search/image", files={"file": ("a.jpg", b"not an image", "image/jpeg")})
    assert r.status_code == 415 and "a.jpg" in r.json()["error"]
    r = client.post("/annotate", files={"file": ("e.png", b"", "image/png")})
    assert r.status_code == 400 and "empty" in r.json()["error"]
    assert client.post("/search/image").status_code == 422  # no file at all
    for url in ["/images/999", "/thumbs/999", "/annotate/999"]:
        r = client.get(url)
        assert r.status_code == 404 and "999" in r.json()["error"]
    assert client.get("/images/../../etc/passwd").status_code == 404
    assert client.get("/images/abc").status_code == 422


def test_deleted_file_is_404_not_500(client, served):
    _, _, photos = served
    res = client.get("/search", params={"q": "dog", "k": 6}).json()["results"]
    os.remove(photos / res[0]["name"])
    assert client.get(res[0]["thumb"]).status_code == 404
    assert client.get(res[0]["image"]).status_code == 404


def test_service_sees_a_concurrent_update(client, served):
    coll, model, photos = served
    write_image(photos / "new.jpg", seed=42, size=48)
    other = Collection(coll.path)  # e.g. `vse index` in another process
    other.update(photos, model.encode_image, progress=False)
    assert client.get("/health").json()["images"] == 7


# ------------------------------------------------------------------ browser
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def browser_page(app, args: tuple[str, ...] = ()):
    """A real headless Chromium page (Debian's, installed by scripts/setup) at ``app``
    served by a real uvicorn server on a free port. Set VSEKIT_SKIP_BROWSER=1 to skip
    on a machine without it."""
    if os.environ.get("VSEKIT_SKIP_BROWSER") == "1":
        pytest.skip("VSEKIT_SKIP_BROWSER=1")
    assert Path(CHROMIUM).is_file(), f"{CHROMIUM} missing: run scripts/setup (apt chromium)"
    from playwright.sync_api import sync_playwright

    with running_server(app) as port, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=list(args))
        page = browser.new_page()
        page.goto(f"http://127.0.0.1:{port}/")
        yield page
        browser.close()


@contextlib.contextmanager
def running_server(app):
    """``app`` served by a real uvicorn server with `vse serve`'s settings on a free
    port (yielded), in a thread; stopped on exit."""
    import uvicorn

    from vsekit.cli.serve import server_config

    port = free_port()
    server = uvicorn.Server(server_config(app, "127.0.0.1", port))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 20
    while not server.started and time.time() < deadline:
        time.sleep(0.05)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def distinct_collection(tmp_path, model, extra=None) -> tuple[Collection, Path]:
    """21 photos that no embedding of theirs calls near-duplicates (the page stacks
    copies, and the tiny random model embeds every photo in nearly one direction), and
    ``extra(photos)`` written beside them; indexed by their colours."""
    from tests.test_results import channel_photos, colour_embed

    photos = tmp_path / "photos"
    channel_photos(photos)
    if extra is not None:
        extra(photos)
    coll = Collection(tmp_path / "idx", model_info(model, str(getattr(model, "path", "tiny"))))
    coll.update(photos, colour_embed, progress=False)
    return coll, photos


@pytest.mark.slow
def test_browser_types_a_query_and_sees_thumbnails(tmp_path):
    model = make_tiny_model(CAPTIONS)
    coll, _ = distinct_collection(tmp_path, model)
    with browser_page(create_app(coll, model)) as page:
        page.fill("#q", "a dog on the grass")
        page.press("#q", "Enter")
        page.wait_for_selector(".card img")
        loaded = "i => i.complete && i.naturalWidth > 0"
        page.wait_for_function(f"[...document.querySelectorAll('.card img')].every({loaded})")
        assert page.locator(".card").count() == 20  # the first page of 21 photos
        assert "results" in page.inner_text("#status")
        page.locator(".card").first.click()
        page.wait_for_selector("#captions li")
        assert page.locator("#captions li").count() == len(CAPTIONS)  # k=5 > pool
        # a photo opens in the image element; the video player stays out of sight
        assert page.locator("#full").is_visible() and not page.locator("#player").is_visible()
        page.screenshot(path=str(tmp_path / "page.png"))


def test_token_cookie_parses_leniently_and_is_checked_before_the_body(served):
    """A cookie Python's SimpleCookie rejects, sent before vse_token, does not hide it
    (Starlette's parser); a request without the token gets 401 before one byte of its
    body is read (no upload is parsed or spooled for an unauthenticated client)."""
    import asyncio

    from vsekit.serve.guard import GuardConfig, GuardMiddleware

    coll, model = served[:2]
    cfg = GuardConfig(token="s3cret", allowed_hosts=["127.0.0.1"])
    c = TestClient(create_app(coll, model, guard=cfg), base_url="http://127.0.0.1")
    bad_first = {"Cookie": 'theme="dark; x=[1,2]; vse_token=s3cret'}
    assert c.get("/health", headers=bad_first).status_code == 200
    assert c.get("/health", headers={"Cookie": "vse_token=nope"}).status_code == 401
    page = c.get("/docs?token=s3cret")  # a route that returns its own Response
    assert page.status_code == 200 and "vse_token=s3cret" in page.headers["set-cookie"]
    pulled, sent = [], []

    async def inner(scope, receive, send):
        await receive()

    async def receive():
        pulled.append(1)
        return {"type": "http.request", "body": b"x" * 1000, "more_body": True}

    async def send(msg):
        sent.append(msg)

    scope = {"type": "http", "headers": [(b"host", b"127.0.0.1")], "query_string": b""}
    asyncio.run(GuardMiddleware(inner, cfg)(scope, receive, send))
    assert pulled == [] and sent[0]["status"] == 401


@pytest.mark.slow
def test_browser_page_features(tmp_path):
    """Load more, filters, query algebra, an error clearing stale results, the viewer's
    close button, Escape and selectable text, the duplicates view, and /docs offline."""
    model = make_tiny_model(CAPTIONS)
    coll, _ = distinct_collection(
        tmp_path, model, lambda photos: shutil.copy(photos / "Lr.png", photos / "copy.png")
    )
    count = "document.querySelectorAll('.card').length"
    with browser_page(create_app(coll, model)) as page:
        page.fill("#q", '"a dog" + "grass" - "snow"')  # algebra
        page.press("#q", "Enter")
        page.wait_for_function(f"{count} === 20")
        assert page.locator("#more").is_visible()
        page.click("#more")
        page.wait_for_function(f"{count} === 21")  # 21 photos, the copy stacked on its own
        assert page.locator(".card.stacked").count() == 1
        assert "1 copy stacked" in page.inner_text("#status")
        assert not page.locator("#more").is_visible()
        # the viewer: text inside can be selected (a click there keeps it open)
        page.locator(".card").first.click()
        page.wait_for_selector("#captions li")
        page.locator("#captions li").first.click()
        page.locator("#fname").dblclick()
        assert page.evaluate("getSelection().toString().length") > 0
        assert page.locator("#viewer").is_visible()
        page.click("#close")
        assert not page.locator("#viewer").is_visible()
        page.locator(".card").nth(1).click()
        page.wait_for_selector("#viewer.open")
        page.keyboard.press("Escape")
        assert not page.locator("#viewer").is_visible()
        # a filter nothing passes, then an error: no stale results stay on screen
        page.fill("#before", "2001")
        page.press("#q", "Enter")
        page.wait_for_function(f"{count} === 0")
        assert "0 results" in page.inner_text("#status")
        page.fill("#before", "")
        page.fill("#after", "June")
        page.press("#q", "Enter")
        page.wait_for_function("document.getElementById('status').textContent.startsWith('Error')")
        assert "after" in page.inner_text("#status") and page.locator(".card").count() == 0
        # duplicates: the copy and its original, as one exact group
        page.click("#dups")
        page.wait_for_selector(".group")
        assert "Exact copies (2)" in page.inner_text(".group h3")
        # /docs renders Swagger UI from the package, with no network
        page.goto(page.url.rstrip("/") + "/docs")
        page.wait_for_selector(".swagger-ui .info", timeout=20_000)
        assert "vsekit API" in page.title()


@pytest.mark.slow
def test_browser_stacks_cues_and_the_viewer(tmp_path):
    """Copies as one tile with a count, the calibrated relevance cue on every tile (the
    raw score in its tooltip), and the viewer: ArrowRight / ArrowLeft and the buttons
    step through the results (wrapping), each photo's date, camera, place and size."""
    import vsekit
    from tests.test_filters import exif_photo
    from tests.test_results import calibrate
    from vsekit.index.query import search_text

    bundle = make_tiny_model(CAPTIONS).save(tmp_path / "m")
    model = vsekit.load_model(str(bundle), backend="torch")

    def extra(photos):
        shutil.copy(photos / "Lg.png", photos / "Lg copy.png")
        shutil.copy(photos / "Lg.png", photos / "Lg copy 2.png")
        exif_photo(photos / "trip.jpg", 1)  # Canon EOS 5D, 2019-02-15, New York

    coll, photos = distinct_collection(tmp_path, model, extra)
    query = "a red car"
    raw = search_text(coll, model, query, k=20, stack=True)
    strong, weak = raw[3].score, raw[12].score  # all three cues among the first 20
    calibrate(bundle, model.fingerprint, strong, weak)
    model = vsekit.load_model(str(bundle), backend="torch")
    hits = search_text(coll, model, query, k=20, stack=True)
    want = {str(h.id): h.cue for h in hits}
    assert set(want.values()) == {"strong", "weak", "none"}
    trip = next(i for i, h in enumerate(hits) if h.path.endswith("trip.jpg"))
    with browser_page(create_app(coll, model)) as page:
        page.fill("#q", query)
        page.press("#q", "Enter")
        page.wait_for_function("document.querySelectorAll('.card').length === 20")
        # one tile for the three copies of Lg.png, with its count
        stacked = page.locator(".card.stacked")
        assert stacked.count() == 1 and stacked.locator(".stack").inner_text() == "3 copies"
        assert "2 copies stacked" in page.inner_text("#status")
        # every tile's cue is the library's, with the raw score in its tooltip
        got = page.evaluate("""[...document.querySelectorAll('.card')].map(c => [c.dataset.id,
            c.querySelector('.cue').className.split(' ')[1], c.querySelector('.cue').title])""")
        assert {i: c for i, c, _ in got} == want
        assert all(t.startswith("score ") for _, _, t in got)
        assert {c.inner_text() for c in page.locator(".card .cue").all()} == {
            "strong match", "weak match", "no match"}  # fmt: skip
        # the viewer: arrows and buttons step through the results, wrapping around
        names = [Path(h.path).name for h in hits]
        page.locator(".card").first.click()
        page.wait_for_selector("#viewer.open")
        fname = lambda: page.inner_text("#fname")  # noqa: E731
        assert names[0] in fname() and page.inner_text("#pos") == "1 / 20"
        page.keyboard.press("ArrowRight")
        assert names[1] in fname() and page.inner_text("#pos") == "2 / 20"
        page.keyboard.press("ArrowRight")
        assert names[2] in fname()
        page.keyboard.press("ArrowLeft")
        assert names[1] in fname()
        page.click("#prev")
        page.keyboard.press("ArrowLeft")  # before the first: the last
        assert names[19] in fname() and page.inner_text("#pos") == "20 / 20"
        page.click("#next")
        assert names[0] in fname()
        # the stacked tile's viewer names its copies
        page.keyboard.press("Escape")
        assert not page.locator("#viewer").is_visible()
        stacked.click()
        page.wait_for_selector("#viewer.open")
        assert "Lg copy" in page.inner_text("#copies")
        # facts from the index: a PNG without EXIF, then the photo with all of them
        page.wait_for_selector("#facts dd[data-fact=size]")
        assert page.inner_text("#facts dd[data-fact=size]").startswith("32 × 32 px, ")
        assert page.inner_text("#facts dd[data-fact=place]") == "no GPS position"
        assert "file date" in page.inner_text("#facts dd[data-fact=date]")
        at = int(page.inner_text("#pos").split(" / ")[0]) - 1
        for _ in range((trip - at) % 20):
            page.keyboard.press("ArrowRight")
        assert "trip.jpg" in fname()
        page.wait_for_selector("#facts dd[data-fact=camera]:text('Canon EOS 5D')")
        assert page.inner_text("#facts dd[data-fact=date]") == "2019-02-15 10:00:00"
        size = (photos / "trip.jpg").stat().st_size
        shown = f"{size} B" if size < 1024 else f"{size / 1024:.0f} KB"
        assert page.inner_text("#facts dd[data-fact=size]") == f"24 × 24 px, {shown}"
        link = page.locator("#facts dd[data-fact=place] a")
        assert link.inner_text() == "40.68920, -74.04450"
        assert link.get_attribute("href").startswith("https://www.openstreetmap.org/?mlat=40.6892")
        page.keyboard.press("Escape")
        assert not page.locator("#viewer").is_visible()
        page.screenshot(path=str(tmp_path / "viewer.png"))


@pytest.mark.slow
def test_browser_moves_duplicates_after_a_preview_and_a_confirmation(tmp_path):
    """The duplicates view marks the file kept by default; Preview shows the plan and
    moves nothing; Move asks first (dismissed: nothing moves), then moves the copy out
    and names the undo list."""
    model = make_tiny_model(CAPTIONS)

    def extra(photos):
        (photos / "old").mkdir()
        shutil.copy(photos / "Lr.png", photos / "old" / "Lr again.png")

    coll, photos = distinct_collection(tmp_path, model, extra)
    moved = tmp_path / "moved"
    moved.mkdir()
    with browser_page(create_app(coll, model)) as page:
        page.click("#dups")
        page.wait_for_selector(".group h3")
        assert "Exact copies (2)" in page.inner_text(".group h3")
        assert page.locator("figure.keep").count() == 1
        page.fill("#moveto", str(moved))
        page.click("#preview")
        page.wait_for_function(
            "document.getElementById('status').textContent.startsWith('Preview')"
        )
        assert "1 file would move" in page.inner_text("#status")
        assert page.locator("figure.move").count() == 1 and page.locator("figure.keep").count() == 1
        both = [photos / "Lr.png", photos / "old" / "Lr again.png"]
        assert all(p.is_file() for p in both) and not any(moved.iterdir())
        asked = []

        def answer(dialog, accept):
            asked.append(dialog.message)
            dialog.accept() if accept else dialog.dismiss()

        page.once("dialog", lambda d: answer(d, False))
        page.click("#apply")  # returns once the dialog is answered
        assert len(asked) == 1 and page.inner_text("#status").startswith("Preview")
        assert all(p.is_file() for p in both) and not any(moved.iterdir())
        page.once("dialog", lambda d: answer(d, True))
        page.click("#apply")
        page.wait_for_function("document.getElementById('status').textContent.startsWith('Moved')")
        assert len(asked) == 2 and "Move 1 file to" in asked[0] and "Nothing is deleted" in asked[0]
        assert "Undo list:" in page.inner_text("#status")
        assert sum(p.is_file() for p in both) == 1  # one of the copies left the folder
        assert len([p for p in moved.rglob("*.png")]) == 1
