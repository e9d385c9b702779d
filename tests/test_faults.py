"""Fault injection: the index, the service and the CLI under hostile and careless use.

One section per class of fault: concurrent writers (real processes), files replaced
after indexing, decompression bombs, oversized uploads, damaged or foreign index files,
file-system oddities, CLI edges, exposure (token, Host, paths), kill -9 in compaction.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from tests.conftest import write_image
from tests.test_index import DIM, INFO, CountingEmbedder
from vsekit.index import Collection, CollectionError
from vsekit.index.collection import FileChanged, FileNotIndexed
from vsekit.media.images import ImageError, ImageTooLarge, load_image

ROOT = Path(__file__).resolve().parents[1]


def photos_in(folder: Path, n: int, start: int = 0) -> Path:
    for i in range(start, start + n):
        write_image(folder / f"{i:03d}.png", seed=i)
    return folder


def assert_consistent(coll: Collection, folder: Path) -> None:
    """Every file has its own row, and that row holds the file's own embedding."""
    coll.refresh()
    coll.check()
    assert len(set(coll.rows.tolist())) == len(coll)
    emb = CountingEmbedder()
    for i in coll.ids:
        with Image.open(coll.path_of(i)) as im:
            want = emb([im.convert("RGB")])[0]
        np.testing.assert_allclose(coll.embedding_of(i), want, atol=1e-6)


# ------------------------------------------------------------ 1. concurrent writers
WRITER = """
import sys
sys.path.insert(0, {root!r})
from tests.test_index import CountingEmbedder, INFO
from vsekit.index import Collection
c = Collection({idx!r}, INFO)
rep = c.update({photos!r}, CountingEmbedder(delay=0.02), batch_size=2, progress=False)
print(rep.added)
"""


def test_two_concurrent_indexers_never_share_a_row(tmp_path):
    """Two writer processes on one index at once (two folders and the same folder):
    both succeed, and every file keeps its own row with its own embedding."""
    a, b = photos_in(tmp_path / "a", 16), photos_in(tmp_path / "b", 16, start=50)
    idx = tmp_path / "idx"
    Collection(idx, INFO)  # created first, so both open an existing index
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER.format(root=str(ROOT), idx=str(idx), photos=str(p))],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for p in (a, b, a)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [o[1] for o in outs]
    added = sorted(int(o[0]) for o in outs)
    assert added == [0, 16, 16]  # the second run over `a` found it done
    coll = Collection(idx)
    assert len(coll) == 32
    assert_consistent(coll, tmp_path)


def test_the_check_at_open_never_sees_a_commit_half_way(tmp_path, monkeypatch):
    """The integrity check that every open runs reads the index in one transaction: a
    writer that commits new rows between its reads (here, forced between the row count
    and the checksums) waits for it, instead of showing rows past the count read first
    as damage. This is the race the concurrent-writer test above hit now and then."""
    from vsekit.index import integrity

    idx = tmp_path / "idx"
    Collection(idx, INFO).update(photos_in(tmp_path / "a", 4), CountingEmbedder(), progress=False)
    more = photos_in(tmp_path / "b", 4, start=50)
    embedding, reading = threading.Event(), threading.Event()
    errors: list[BaseException] = []
    held_off: list[bool] = []
    main = threading.current_thread()

    class HeldEmbedder(CountingEmbedder):
        """Embeds once the reader is inside its check: then the writer writes and commits."""

        def __call__(self, images):
            embedding.set()
            assert reading.wait(timeout=60)
            return super().__call__(images)

    def add_more():
        try:
            Collection(idx, INFO).update(more, HeldEmbedder(), progress=False)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    real = integrity.read_sums

    def commit_in_between(*args, **kwargs):
        if threading.current_thread() is main and not reading.is_set():
            reading.set()
            writer.join(timeout=1.5)  # long enough to commit, were it not held off
            held_off.append(writer.is_alive())
        return real(*args, **kwargs)

    monkeypatch.setattr(integrity, "read_sums", commit_in_between)
    writer = threading.Thread(target=add_more)
    writer.start()
    assert embedding.wait(timeout=60)  # the writer has opened the index and is embedding
    coll = Collection(idx)  # checks at open, with the writer's commit forced in
    writer.join(timeout=60)
    assert not writer.is_alive() and not errors, errors
    assert held_off == [True]  # it waited for the check's reads
    coll.refresh()
    assert len(coll) == 8
    assert_consistent(coll, tmp_path)


def test_a_writer_waits_for_the_checks_reads_not_its_scan(tmp_path, monkeypatch):
    """The check scans the rows (up to a GiB at each open) after its transaction: while
    it scans, a writer can commit at once."""
    from vsekit.index import integrity

    idx = tmp_path / "idx"
    Collection(idx, INFO).update(photos_in(tmp_path / "a", 4), CountingEmbedder(), progress=False)
    committed: list[bool] = []
    real = integrity.bad_rows

    def commit_while_scanning(*args, **kwargs):
        other = sqlite3.connect(idx / "index.sqlite", timeout=0)
        try:
            other.execute("BEGIN IMMEDIATE")
            other.execute("UPDATE meta SET value = value WHERE key = 'version'")
            other.execute("COMMIT")  # needs every reader's lock gone
            committed.append(True)
        finally:
            other.close()
        return real(*args, **kwargs)

    monkeypatch.setattr(integrity, "bad_rows", commit_while_scanning)
    Collection(idx)
    assert committed == [True]


# ------------------------------------------------------------ 2. files replaced later
def test_replaced_files_are_never_served(tmp_path):
    folder = photos_in(tmp_path / "p", 3)
    coll = Collection(tmp_path / "idx", INFO)
    coll.update(folder, CountingEmbedder(), progress=False)
    ids = {Path(coll.path_of(i)).name: int(i) for i in coll.ids}
    with coll.open_file(ids["000.png"]) as fh:
        assert fh.read() == (folder / "000.png").read_bytes()
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0:root:/root:/bin/bash\n")
    (folder / "000.png").unlink()
    (folder / "000.png").symlink_to(secret)  # an indexed photo becomes a symlink out
    with pytest.raises(FileChanged, match="outside the indexed folders"):
        coll.open_file(ids["000.png"])
    (folder / "001.png").unlink()
    (folder / "001.png").symlink_to(folder / "002.png")  # inside, but another file
    with pytest.raises(FileChanged, match="changed since it was indexed"):
        coll.open_file(ids["001.png"])
    (folder / "002.png").write_bytes(b"x" * 10)  # rewritten in place
    with pytest.raises(FileChanged):
        coll.open_file(ids["002.png"])
    with pytest.raises(FileNotIndexed):
        coll.open_file(12345)


def tiny_indexed(tmp_path: Path, folder_name: str, n: int):
    """``(collection, tiny model, folder)``: ``n`` photos indexed with the tiny model."""
    from tests.conftest import make_tiny_model
    from vsekit.index import model_info

    model = make_tiny_model()
    folder = tmp_path / folder_name
    for i in range(n):
        write_image(folder / f"{i}.jpg", seed=i, size=48)
    coll = Collection(tmp_path / "idx", model_info(model, "tiny"))
    coll.update(folder, model.encode_image, progress=False)
    return coll, model, folder


def test_service_answers_409_json_for_a_replaced_file(tmp_path):
    from vsekit.serve.app import create_app

    coll, model, folder = tiny_indexed(tmp_path, "p", 2)
    client = TestClient(create_app(coll, model), base_url="http://127.0.0.1")
    target = next(int(i) for i in coll.ids if coll.path_of(i).endswith("0.jpg"))
    (folder / "0.jpg").unlink()
    (folder / "0.jpg").symlink_to("/etc/passwd")
    for url in (f"/images/{target}", f"/thumbs/{target}"):
        r = client.get(url)
        assert r.status_code == 409 and "root:" not in r.text
        assert r.headers["content-type"] == "application/json" and "error" in r.json()


# ------------------------------------------------------------ 3. decompression bombs
def png_bomb(path: Path, side: int) -> Path:
    """A tiny PNG file whose header says ``side x side`` pixels (1-bit, all black)."""
    Image.new("1", (side, side)).save(path, optimize=True)
    return path


@pytest.fixture(scope="module")
def bombs(tmp_path_factory):
    d = tmp_path_factory.mktemp("bombs")
    return {"30k": png_bomb(d / "b30k.png", 30_000), "19k": png_bomb(d / "b19k.png", 19_000)}


def test_bombs_are_refused_from_the_header(bombs):
    for path in bombs.values():
        assert path.stat().st_size < 200_000
        with pytest.raises(ImageTooLarge, match="over the budget"):
            load_image(path)


def test_large_jpeg_decodes_at_reduced_size(tmp_path, monkeypatch):
    """A JPEG over the budget is still read when the caller needs only a small image:
    it is decoded at a reduced DCT scale, never at full size."""
    import vsekit.media.images as images

    monkeypatch.setattr(images, "MAX_PIXELS", 1_000_000)
    p = tmp_path / "big.jpg"
    Image.new("RGB", (2400, 1600), (200, 10, 10)).save(p, quality=80)
    with pytest.raises(ImageTooLarge):
        load_image(p)
    im = load_image(p, reduce_to=300)
    assert im.size == (600, 400)  # 1/4 scale: the smallest that keeps 300 px


def test_bomb_checks_are_thread_safe(bombs, tmp_path):
    """Bombs and good images decoded from many threads at once: every bomb is refused,
    every good image decodes (the old guard changed global warning filters)."""
    good = write_image(tmp_path / "ok.png", size=64)
    results: list[str] = []

    def work(path):
        try:
            load_image(path)
            results.append("ok")
        except ImageTooLarge:
            results.append("bomb")

    threads = [threading.Thread(target=work, args=(p,)) for p in [good, bombs["19k"]] * 8]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["bomb"] * 8 + ["ok"] * 8


def test_index_reports_a_bomb_and_indexes_the_rest(tmp_path, bombs):
    folder = photos_in(tmp_path / "p", 4)
    os.link(bombs["30k"], folder / "zz-bomb.png")
    coll = Collection(tmp_path / "idx", INFO)
    rep = coll.update(folder, CountingEmbedder(), progress=False)
    assert rep.added == 4 and len(rep.failed) == 1
    assert "zz-bomb.png" in rep.failed[0][0] and "over the budget" in rep.failed[0][1]
    rep = coll.update(folder, CountingEmbedder(), progress=False)  # not retried, still shown
    assert rep.embedded == 0 and rep.failed[0][1] == "unchanged since it failed"


def test_service_answers_413_json_for_bombs(bombs):
    from tests.conftest import make_tiny_model
    from vsekit.serve.app import create_app

    model = make_tiny_model()
    client = TestClient(create_app(_empty_collection(model), model), base_url="http://127.0.0.1")
    data = bombs["30k"].read_bytes()
    for url in ("/search/image", "/annotate"):
        r = client.post(url, files={"file": ("b.png", data, "image/png")})
        assert r.status_code == 413 and "over the budget" in r.json()["error"]


def _empty_collection(model, path: Path | None = None) -> Collection:
    import tempfile

    from vsekit.index import model_info

    path = path or Path(tempfile.mkdtemp()) / "idx"
    return Collection(path, model_info(model, "tiny"))


# ------------------------------------------------------------ 4. uploads
def test_body_is_cut_off_while_it_arrives():
    """The guard stops reading a body without Content-Length as soon as it passes the
    limit: the app never receives more, and the client gets a 413."""
    from vsekit.serve.guard import GuardConfig, GuardMiddleware

    pulled = []

    async def inner(scope, receive, send):  # reads the whole body, like a form parser
        while True:
            msg = await receive()
            if not msg.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def receive():
        pulled.append(1)
        return {"type": "http.request", "body": b"x" * 1000, "more_body": True}

    sent = []

    async def send(msg):
        sent.append(msg)

    guard = GuardMiddleware(inner, GuardConfig(max_upload_bytes=10_000))
    scope = {"type": "http", "headers": [(b"host", b"127.0.0.1")], "query_string": b""}
    asyncio.run(guard(scope, receive, send))
    assert len(pulled) == 11  # 11,000 bytes: the first chunk over the limit, no more
    assert sent[0]["status"] == 413 and b"larger than" in sent[1]["body"]


def test_declared_oversize_upload_is_refused_before_reading(tmp_path):
    from tests.conftest import make_tiny_model
    from vsekit.serve.app import create_app
    from vsekit.serve.guard import GuardConfig

    model = make_tiny_model()
    guard = GuardConfig(allowed_hosts=["127.0.0.1"], max_upload_bytes=1000)
    client = TestClient(create_app(_empty_collection(model), model, guard=guard),
                        base_url="http://127.0.0.1")  # fmt: skip
    buf = io.BytesIO()
    Image.new("RGB", (200, 200), (1, 2, 3)).save(buf, "PNG")
    r = client.post("/search/image", files={"file": ("x.png", buf.getvalue() * 5, "image/png")})
    assert r.status_code == 413 and r.json()["error"].startswith("body: larger than")


# ------------------------------------------------------------ 5. damaged index files
@pytest.fixture
def built(tmp_path):
    folder = photos_in(tmp_path / "p", 6)
    coll = Collection(tmp_path / "idx", INFO)
    coll.update(folder, CountingEmbedder(), batch_size=2, progress=False)
    coll.close()
    return tmp_path / "idx", folder


def test_missing_embeddings_are_an_error_then_repaired(built):
    idx, folder = built
    (idx / "emb-0.f32").unlink()
    with pytest.raises(CollectionError, match=r"emb-0\.f32: missing.*--repair"):
        Collection(idx)
    coll = Collection(idx, INFO, repair=True)
    emb = CountingEmbedder()
    rep = coll.update(folder, emb, progress=False)
    assert rep.added == 6 and emb.seen == 6
    assert_consistent(coll, folder)


def test_truncated_embeddings_repair_reembeds_only_what_is_lost(built):
    idx, folder = built
    f = idx / "emb-0.f32"
    with open(f, "r+b") as fh:
        fh.truncate(4 * DIM * 4 + 3)  # 4 whole rows and a bit survive
    with pytest.raises(CollectionError, match=r"truncated .*--repair"):
        Collection(idx)
    coll = Collection(idx, INFO, repair=True)
    emb = CountingEmbedder()
    rep = coll.update(folder, emb, progress=False)
    assert emb.seen == 2 and rep.unchanged == 4
    assert_consistent(coll, folder)


def test_rows_shared_by_two_files_are_detected_and_repaired(built):
    idx, folder = built
    db = sqlite3.connect(idx / "index.sqlite")
    with db:
        db.execute("UPDATE files SET row = 0 WHERE row = 1")
    db.close()
    with pytest.raises(CollectionError, match="share an embedding row"):
        Collection(idx)
    coll = Collection(idx, INFO, repair=True)
    emb = CountingEmbedder()
    coll.update(folder, emb, progress=False)
    assert emb.seen == 2
    assert_consistent(coll, folder)


@pytest.mark.parametrize("damage", ["garbage", "empty", "foreign"])
def test_damaged_or_foreign_database_is_a_one_line_error(built, damage):
    idx, _ = built
    db = idx / "index.sqlite"
    for extra in idx.glob("index.sqlite-*"):
        extra.unlink()
    if damage == "garbage":
        db.write_bytes(b"this is not sqlite" * 100)
    elif damage == "empty":
        db.write_bytes(b"")
    else:
        db.unlink()
        con = sqlite3.connect(db)
        con.execute("CREATE TABLE meta (key TEXT, value TEXT)")
        con.execute("INSERT INTO meta VALUES ('colour', 'red')")
        con.commit()
        con.close()
    with pytest.raises(CollectionError) as e:
        Collection(idx)
    msg = str(e.value)
    assert "index.sqlite" in msg and "--rebuild" in msg and "\n" not in msg


def test_index_path_that_is_a_file(tmp_path):
    (tmp_path / "idx").write_text("x")
    with pytest.raises(CollectionError, match="is a file, not an index folder"):
        Collection(tmp_path / "idx", INFO)


# ------------------------------------------------------------ 6. file-system oddities
def test_special_files_are_reported_never_opened(tmp_path, monkeypatch):
    folder = photos_in(tmp_path / "p", 2)
    os.mkfifo(folder / "fifo.jpg")  # opening it would block forever
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(folder / "sock.png"))
    (folder / "dev.jpg").symlink_to("/dev/zero")  # a device named like a photo
    (folder / "broken.jpg").symlink_to(folder / "nowhere.jpg")
    (folder / "loop.jpg").symlink_to(folder / "loop.jpg")
    (folder / "out.png").symlink_to(write_image(tmp_path / "elsewhere.png", seed=3))
    (folder / "in.png").symlink_to(folder / "000.png")  # a link inside the folder is fine
    bad_name = os.fsencode(str(folder)) + b"/caf\xe9.jpg"
    write_image(Path(os.fsdecode(bad_name)), seed=9)
    locked = folder / "locked"
    photos_in(locked, 1, start=30)
    real_scandir = os.scandir

    def scandir(path="."):  # root ignores file modes, so deny this folder by hand
        if os.fspath(path) == str(locked):
            raise PermissionError(13, "Permission denied", str(locked))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    coll = Collection(tmp_path / "idx", INFO)
    rep = coll.update(folder, CountingEmbedder(), progress=False)
    sock.close()
    reasons = {Path(p).name: why for p, why in rep.failed}
    assert rep.added == 4  # 000, 001, in.png, and the name that is not UTF-8 (kept as bytes)
    assert reasons["out.png"] == "symbolic link to a file outside the folder"
    assert "not a regular file" in reasons["fifo.jpg"]
    assert "not a regular file" in reasons["sock.png"]
    assert "not a regular file" in reasons["dev.jpg"]
    assert reasons["broken.jpg"] == "broken symbolic link"
    assert "cannot be read" in reasons["loop.jpg"]
    assert "unreadable folder" in reasons["locked"]
    assert len(rep.failed) == 7  # each reported once


def test_read_only_index_still_searches(built, monkeypatch):
    idx, folder = built
    import vsekit.index.collection as collection

    real_access = os.access
    monkeypatch.setattr(  # root can write anywhere: make this index read-only by hand
        collection.os,
        "access",
        lambda p, mode: False if (mode & os.W_OK and str(p).startswith(str(idx))) else
        real_access(p, mode),
    )  # fmt: skip
    for extra in idx.glob("index.sqlite-*"):
        extra.unlink()
    coll = Collection(idx)
    assert coll.read_only and len(coll) == 6
    hits = coll.search(np.ones((1, DIM), np.float32), k=3)[0]
    assert len(hits) == 3
    with pytest.raises(CollectionError, match="read-only"):
        coll.update(folder, CountingEmbedder(), progress=False)


# ------------------------------------------------------------ 7. CLI edges
@pytest.mark.parametrize(
    "argv",
    [
        ["index", ".", "--batch-size", "0"],
        ["index", ".", "--batch-size", "-3"],
        ["search", "dog", "--k", "0"],
        ["annotate", "x.jpg", "--tags", "0"],
        ["train", "configs", "--epochs", "0"],
        ["serve", "--port", "70000"],
        ["serve", "--port", "0"],
        [
            "features",
            "extract",
            "--root",
            ".",
            "--backbone",
            "resnet50",
            "--out",
            "x",
            "--batch-size",
            "0",
        ],
    ],  # fmt: skip
)
def test_cli_rejects_non_positive_numbers(argv, capsys):
    from vsekit.cli import main

    with pytest.raises(SystemExit) as e:
        main(argv)
    out, err = capsys.readouterr()
    assert e.value.code == 2 and out == ""
    last = err.strip().splitlines()[-1]
    assert last.startswith("vse ") and ("at least 1" in last or "at most 65535" in last)


def test_cli_edges_are_one_line_errors_and_leave_nothing(tmp_path, capsys):
    from vsekit.cli import main

    cases = [
        (["train", str(ROOT / "configs")], "is a folder, not a config file"),
        (["train", str(ROOT / "configs/flickr8k-tags.yaml"), "--set", "train.lr=[1"],
         "not valid YAML"),
        (["index", str(tmp_path / "missing"), "--index", str(tmp_path / "idx")], "not a folder"),
        (["index", str(tmp_path), "--index", str(tmp_path / "file" / "idx")], "file"),
        (["search", "dog", "--index", str(tmp_path / "none")], "no index here"),
    ]  # fmt: skip
    (tmp_path / "file").write_text("x")
    for argv, msg in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("vse: error:") and err.count("\n") == 1, err
        assert msg in err
    assert not (tmp_path / "idx").exists() and not (tmp_path / "none").exists()


# ------------------------------------------------------------ 8. exposure
@pytest.fixture
def guarded(tmp_path):
    from vsekit.serve.app import create_app
    from vsekit.serve.guard import GuardConfig

    coll, model, folder = tiny_indexed(tmp_path, "photos", 3)

    def client(**kw):
        cfg = GuardConfig(**{"allowed_hosts": ["127.0.0.1", "localhost"], **kw})
        return TestClient(create_app(coll, model, guard=cfg), base_url="http://127.0.0.1:8000")

    return client, folder


def test_token_is_required_on_every_endpoint(guarded):
    make, _ = guarded
    c = make(token="s3cret")
    for url in ["/", "/health", "/search?q=dog", "/images/1", "/thumbs/1", "/docs",
                "/openapi.json", "/annotate/1"]:  # fmt: skip
        r = c.get(url)
        assert r.status_code == 401 and r.json() == {"error": "token: missing or wrong"}, url
        assert c.get(url, headers={"Authorization": "Bearer nope"}).status_code == 401
    ok = {"Authorization": "Bearer s3cret"}
    assert c.get("/health", headers=ok).status_code == 200
    assert c.get("/health", headers={"X-Vse-Token": "s3cret"}).status_code == 200
    assert c.post("/annotate", headers={"Authorization": "Bearer x"}).status_code == 401
    page = c.get("/?token=s3cret")  # opening the page with the token sets the cookie
    assert page.status_code == 200 and "vse_token=s3cret" in page.headers["set-cookie"]
    assert c.get("/search?q=dog").status_code == 200  # the cookie now carries it


def test_host_header_must_name_this_server(guarded):
    make, _ = guarded
    c = make()
    assert c.get("/health").status_code == 200
    assert c.get("/health", headers={"Host": "localhost:8000"}).status_code == 200
    r = c.get("/health", headers={"Host": "evil.example:8000"})  # DNS rebinding
    assert r.status_code == 403 and "evil.example" in r.json()["error"]
    assert make(allowed_hosts=["photos.lan"]).get(
        "/health", headers={"Host": "photos.lan"}).status_code == 200  # fmt: skip


def test_no_absolute_paths_unless_asked(guarded):
    make, folder = guarded
    body = make().get("/search", params={"q": "dog", "k": 3}).text
    assert str(folder) not in body and "/photos/" not in body.replace('"photos/', "")
    assert json.loads(body)["results"][0]["path"].startswith("photos/")
    shown = make(show_paths=True).get("/search", params={"q": "dog", "k": 3}).json()
    assert shown["results"][0]["path"].startswith(str(folder))


# ------------------------------------------------------------ kill -9 in compaction
COMPACTOR = """
import sys, time
sys.path.insert(0, {root!r})
import numpy as np
from tests.test_index import INFO
from vsekit.index import Collection
import vsekit.index.collection as collection
real = np.ascontiguousarray
def slow(a, *k, **kw):
    print("chunk", flush=True)
    time.sleep(0.2)
    return real(a, *k, **kw)
collection.np.ascontiguousarray = slow
Collection({idx!r}).compact(min_garbage=1)
"""


def test_kill_9_during_compaction_leaves_a_usable_index(tmp_path):
    folder = photos_in(tmp_path / "p", 12)
    coll = Collection(tmp_path / "idx", INFO)
    coll.update(folder, CountingEmbedder(), progress=False)
    for i in range(7):
        (folder / f"{i:03d}.png").unlink()
    coll.update(folder, CountingEmbedder(), progress=False)  # 7 dead rows, not compacted
    coll.close()
    script = COMPACTOR.format(root=str(ROOT), idx=str(tmp_path / "idx"))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "chunk"  # in the middle of writing emb-1
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    coll = Collection(tmp_path / "idx")
    assert len(coll) == 5
    assert_consistent(coll, folder)
    coll.update(folder, CountingEmbedder(), progress=False)  # next write cleans emb-1
    assert coll.compact(min_garbage=1) and coll.n_rows == 5
    assert_consistent(coll, folder)


def test_image_error_names_the_file(tmp_path):
    p = tmp_path / "x.jpg"
    p.write_bytes(b"\xff\xd8\xff" + b"\x00" * 50)
    with pytest.raises(ImageError, match=r"x\.jpg"):
        load_image(p)


@pytest.mark.parametrize("mode", ["1", "P", "RGB"])
def test_heavy_png_is_shrunk_inside_the_decode_slot(tmp_path, mode):
    """A legal but large PNG decodes and comes out no larger than twice the size asked
    for, whatever its mode."""
    p = tmp_path / f"big-{mode}.png"
    Image.new(mode, (3000, 2100)).save(p)
    im = load_image(p, reduce_to=256)
    assert im.mode == "RGB" and 256 <= min(im.size) < 512
    assert load_image(p).size == (3000, 2100)  # without reduce_to: full size


def test_atomically_written_files_are_readable_by_all(tmp_path):
    """safetensors creates 0600 files; a bundle written through atomic_write/atomic_dir
    ends 0644, so a wheel (and a system-wide install) ships files other users can read."""
    import stat

    from safetensors.numpy import save_file

    from vsekit.fsio import atomic_dir, atomic_write

    arrays = {"w": np.zeros(3, np.float32)}
    one = atomic_write(tmp_path / "one.safetensors", lambda t: save_file(arrays, str(t)))
    with atomic_dir(tmp_path / "bundle") as d:
        save_file(arrays, str(d / "model.safetensors"))
    for f in (one, tmp_path / "bundle" / "model.safetensors"):
        assert stat.S_IMODE(f.stat().st_mode) == 0o644, f
