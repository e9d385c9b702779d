"""Concurrency faults: threads writing one file, and a missing cache that many requests
need at once (it is computed once; the others wait or are told to retry, never 500)."""

from __future__ import annotations

import stat
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from vsekit.fsio import atomic_dir, atomic_write


def test_threads_writing_one_file_never_collide(tmp_path):
    """The temporary name was per process: three threads writing one file raised
    FileNotFoundError when one renamed the others' temporary file away."""
    target = tmp_path / "cache.npy"
    errors: list[BaseException] = []

    def write(i: int) -> None:
        def slow(tmp: Path) -> None:
            tmp.write_bytes(bytes([i]) * 1000)
            time.sleep(0.05)

        try:
            for _ in range(5):
                atomic_write(target, slow)
        except BaseException as e:  # noqa: BLE001  (collected, asserted below)
            errors.append(e)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    data = target.read_bytes()
    assert len(data) == 1000 and len(set(data)) == 1  # one writer's whole content
    assert [p.name for p in tmp_path.iterdir()] == ["cache.npy"]  # no temporary left
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


def test_threads_building_one_folder_never_collide(tmp_path):
    errors: list[BaseException] = []

    def build(i: int) -> None:
        try:
            for _ in range(3):
                with atomic_dir(tmp_path / "bundle") as d:
                    (d / "a.txt").write_text(str(i))
                    time.sleep(0.03)
                    (d / "b.txt").write_text(str(i))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=build, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    a, b = ((tmp_path / "bundle" / n).read_text() for n in ("a.txt", "b.txt"))
    assert a == b  # one build's files, never a mix
    assert stat.S_IMODE((tmp_path / "bundle").stat().st_mode) == 0o755
    assert [p.name for p in tmp_path.iterdir()] == ["bundle"]


# ------------------------------------------------- a missing caption pool, many askers
CAPTIONS = [f"a photo number {i} of a dog" for i in range(40)]


class SlowText:
    """Wraps a model's ``encode_text``: slow, and counts the captions it embedded."""

    def __init__(self, model, delay: float) -> None:
        self.inner, self.delay, self.count = model.encode_text, delay, 0
        self.lock = threading.Lock()

    def __call__(self, texts, *a, **kw):
        with self.lock:
            self.count += 1 if isinstance(texts, str) else len(texts)
        time.sleep(self.delay)
        return self.inner(texts, *a, **kw)


@pytest.fixture
def pool_model(tmp_path, monkeypatch):
    from tests.conftest import make_tiny_model

    monkeypatch.setenv("VSEKIT_CACHE", str(tmp_path / "cache"))
    model = make_tiny_model(CAPTIONS)
    model.encode_text = SlowText(model, 0.5)
    return model


def test_a_pool_asked_for_by_many_threads_is_computed_once(pool_model):
    out: list = []
    threads = [
        threading.Thread(target=lambda: out.append(pool_model.caption_pool.best(np.ones(6), 2)))
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert pool_model.encode_text.count == len(CAPTIONS)  # not 4x
    assert len(out) == 4 and all(o == out[0] for o in out)


def test_a_damaged_pool_cache_is_never_used(pool_model, tmp_path):
    """Same size, other bytes (a flipped bit, zeros, NaNs): the cache's sha256 is in its
    name, so the file is recomputed, never read."""
    from vsekit.runtime.captions import CaptionPool

    pool_model.encode_text.delay = 0
    want = CaptionPool(pool_model).best(np.ones(6), 3)
    (cached,) = (tmp_path / "cache" / "captions").glob("*.npy")
    for damage in ("flip", "zeros", "nan"):
        data = bytearray(cached.read_bytes())
        if damage == "flip":
            data[-7] ^= 0x10
        elif damage == "zeros":
            data[200:] = bytes(len(data) - 200)
        else:
            data[-24:] = np.full(6, np.nan, np.float32).tobytes()
        cached.write_bytes(bytes(data))
        before = pool_model.encode_text.count
        assert CaptionPool(pool_model).best(np.ones(6), 3) == want, damage
        assert pool_model.encode_text.count == before + len(CAPTIONS), damage  # recomputed
    n = pool_model.encode_text.count
    CaptionPool(pool_model).best(np.ones(6), 3)
    assert pool_model.encode_text.count == n  # the rewritten cache is used again


def test_edited_captions_are_another_cache(pool_model):
    from vsekit.runtime.captions import CaptionPool

    pool_model.encode_text.delay = 0
    a = CaptionPool(pool_model)
    edited = CaptionPool(pool_model, [*CAPTIONS[:-1], "a cat on a sofa"], cache=True)
    assert a.key != edited.key and len(CAPTIONS) == len(edited.captions)
    assert "a cat on a sofa" in [c for c, _ in edited.best(a.embeddings[-1], 40)[0]]


def test_service_first_annotations_are_503_with_retry_after_then_200(pool_model, tmp_path):
    """Three first annotations at once on a fresh cache: 503 + Retry-After (with how far
    the pool is) while it is computed once in the background, never 500; then 200."""
    from fastapi.testclient import TestClient

    from tests.conftest import write_image
    from vsekit.index import Collection, model_info
    from vsekit.serve.app import create_app

    photos = tmp_path / "photos"
    for i in range(3):
        write_image(photos / f"p{i}.jpg", seed=i, size=32)
    coll = Collection(tmp_path / "idx", model_info(pool_model, "tiny"))
    coll.update(photos, pool_model.encode_image, progress=False)
    pool_model.encode_text.delay = 3.0  # longer than a request waits for it (2 s)
    client = TestClient(create_app(coll, pool_model), base_url="http://127.0.0.1")
    first: list = []
    threads = [
        threading.Thread(target=lambda i=i: first.append(client.get(f"/annotate/{i + 1}")))
        for i in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.status_code for r in first] == [503] * 3
    for r in first:
        assert r.status_code in (200, 503), r.text
        if r.status_code == 503:
            assert r.headers["Retry-After"] == "5" and "caption pool" in r.json()["error"]
    deadline = time.time() + 30
    while (r := client.get("/annotate/1")).status_code == 503 and time.time() < deadline:
        time.sleep(0.2)
    assert r.status_code == 200 and len(r.json()["captions"]) == 5
    assert pool_model.encode_text.count == len(CAPTIONS)


def test_a_symlink_swapped_in_a_loop_is_never_a_500(tmp_path):
    """While one thread keeps replacing an indexed photo's symlink (a photo, a dangling
    link, a loop, a folder), requests for it are 200, 404 or 409, never 500."""
    import os

    from fastapi.testclient import TestClient

    from tests.conftest import make_tiny_model, write_image
    from vsekit.index import Collection, model_info
    from vsekit.serve.app import create_app

    photos = tmp_path / "photos"
    real = write_image(photos / "real.png", seed=1)
    link = photos / "link.png"
    link.symlink_to(real)
    model = make_tiny_model()
    coll = Collection(tmp_path / "idx", model_info(model, "tiny"))
    coll.update(photos, model.encode_image, progress=False)
    file_id = next(i for i, p in zip(coll.ids, coll.paths, strict=True) if p.endswith("link.png"))
    client = TestClient(create_app(coll, model), base_url="http://127.0.0.1")
    targets = [real, photos / "nowhere.png", link, photos]
    stop = threading.Event()

    def swap() -> None:
        k = 0
        while not stop.is_set():
            tmp = photos / f".swap{k % 2}"
            tmp.unlink(missing_ok=True)
            tmp.symlink_to(targets[k % len(targets)])
            os.replace(tmp, link)
            k += 1

    t = threading.Thread(target=swap)
    t.start()
    seen = Counter()
    try:
        for _ in range(300):
            for url in (f"/images/{file_id}", f"/thumbs/{file_id}"):
                seen[client.get(url).status_code] += 1
    finally:
        stop.set()
        t.join()
    assert set(seen) <= {200, 404, 409}, seen
    assert seen[200] and (seen[404] or seen[409]), seen  # both kinds really happened


def test_the_pool_cache_never_takes_or_removes_its_penalty_file(tmp_path, monkeypatch):
    """The embeddings' cache name is a prefix of the penalties' one: a missing
    embeddings cache must not make the penalty file look like a damaged candidate."""
    import vsekit
    from tests.conftest import hubness_bundle

    monkeypatch.setenv("VSEKIT_CACHE", str(tmp_path / "cache"))
    bundle, _ = hubness_bundle(tmp_path)
    m = vsekit.load_model(str(bundle), backend="torch")
    m.caption_pool.prepare()
    folder = tmp_path / "cache" / "captions"
    stem = f"{m.fingerprint}-{m.caption_pool.key}"
    (pen,) = folder.glob(f"{stem}-pen-*.npy")
    (emb,) = [f for f in folder.glob(f"{stem}-*.npy") if "-pen-" not in f.name]
    emb.unlink()
    before = pen.stat().st_mtime_ns
    again = vsekit.load_model(str(bundle), backend="torch")
    again.caption_pool.prepare()
    assert pen.exists() and pen.stat().st_mtime_ns == before
    np.testing.assert_allclose(again.caption_pool._hub_penalty(), m.caption_pool._hub_penalty())


def test_vse_index_prepares_the_caption_pool_once(tmp_path, monkeypatch, capsys):
    """The pool's wait happens where a wait is expected (the first `vse index`), not at
    the first annotation; later runs find it on disk and do not read it."""
    from tests.conftest import make_tiny_model, write_image
    from vsekit.cli import main

    monkeypatch.setenv("VSEKIT_CACHE", str(tmp_path / "cache"))
    bundle = make_tiny_model(CAPTIONS).save(tmp_path / "m")
    write_image(tmp_path / "p" / "a.png")
    argv = ["index", str(tmp_path / "p"), "--index", str(tmp_path / "idx"), "--model",
            str(bundle), "--quiet"]  # fmt: skip
    assert main(argv) == 0
    assert "caption pool (once per model)" in capsys.readouterr().err
    assert len(list((tmp_path / "cache" / "captions").glob("*.npy"))) == 1
    assert main(argv) == 0
    assert "caption pool" not in capsys.readouterr().err
    monkeypatch.setenv("VSEKIT_CACHE", str(tmp_path / "cache2"))
    assert main([*argv[:3], str(tmp_path / "idx2"), *argv[4:], "--no-caption-pool"]) == 0
    assert "caption pool" not in capsys.readouterr().err
    assert not list((tmp_path / "cache2").glob("captions/*.npy"))
