"""Watching a folder: new, changed, moved and deleted files are picked up within seconds,
with the index's guarantees (one writer, kill-safe)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.conftest import make_tiny_model, wait_for, write_image
from tests.test_faults import ROOT, assert_consistent
from tests.test_index import INFO, CountingEmbedder
from vsekit.index import Collection
from vsekit.index.watch import watch


def names(coll: Collection) -> set[str]:
    coll.refresh()
    return {Path(p).name for p in coll.paths}


def test_watch_picks_up_new_changed_moved_and_deleted_files(tmp_path):
    photos = tmp_path / "photos"
    for i in range(3):
        write_image(photos / f"{i}.png", seed=i)
    coll = Collection(tmp_path / "idx", INFO)
    emb = CountingEmbedder()

    def update():
        return coll.update(photos, emb, progress=False)

    update()
    reports: list = []
    stop = threading.Event()
    t = threading.Thread(target=watch, args=(photos, update, 0.1, stop, (), reports.append))
    t.start()
    try:
        write_image(photos / "new.png", seed=10)
        assert wait_for(lambda: "new.png" in names(coll))
        (photos / "sub").mkdir()
        shutil.move(photos / "0.png", photos / "sub" / "0.png")
        assert wait_for(lambda: any(getattr(r, "moved", 0) for r in reports))
        (photos / "1.png").unlink()
        assert wait_for(lambda: "1.png" not in names(coll))
        seen = emb.seen
        write_image(photos / "2.png", seed=99)  # changed in place
        assert wait_for(lambda: emb.seen > seen)
    finally:
        stop.set()
        t.join(timeout=10)
    assert not t.is_alive()
    assert names(coll) == {"0.png", "2.png", "new.png"}
    assert_consistent(coll, photos)


def test_a_copy_in_progress_is_indexed_once_it_is_still(tmp_path):
    photos = tmp_path / "photos"
    photos.mkdir()
    coll = Collection(tmp_path / "idx", INFO)
    calls: list = []

    def update():
        calls.append(time.time())
        return coll.update(photos, CountingEmbedder(), progress=False)

    stop = threading.Event()
    t = threading.Thread(target=watch, args=(photos, update, 0.3, stop))
    t.start()
    try:
        target = photos / "big.png"
        src = write_image(tmp_path / "src.png", seed=3, size=200).read_bytes()
        with open(target, "wb") as fh:  # written slowly, in pieces
            for k in range(0, len(src), max(1, len(src) // 5)):
                fh.write(src[k : k + max(1, len(src) // 5)])
                fh.flush()
                time.sleep(0.2)
        assert wait_for(lambda: "big.png" in names(coll))
    finally:
        stop.set()
        t.join(timeout=10)
    assert not coll.failures()  # never indexed half-written
    assert len(calls) == 1


def _vse_script(tmp_path: Path) -> Path:
    """A `vse` entry point that registers the tiny test backbone first."""
    script = tmp_path / "vse.py"
    script.write_text(f"import sys\nsys.path.insert(0, {str(ROOT)!r})\n"
                      "import tests.conftest  # the tiny backbone\n"
                      "from vsekit.cli import main\nsys.exit(main())\n")  # fmt: skip
    return script


def test_cli_watch_runs_until_sigterm_and_leaves_a_consistent_index(tmp_path):
    bundle = make_tiny_model().save(tmp_path / "m")
    photos = tmp_path / "photos"
    write_image(photos / "a.png", seed=1)
    idx = tmp_path / "idx"
    script = _vse_script(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, str(script), "index", str(photos), "--index", str(idx), "--model",
         str(bundle), "--watch", "--interval", "0.2", "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    import queue

    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
    try:
        assert "1 images indexed" in lines.get(timeout=60)
        write_image(photos / "b.png", seed=2)  # at once: before the watcher's first look
        deadline = time.time() + 60
        while time.time() < deadline:  # "HH:MM:SS 2 files: 1 added, ..." (timed lines)
            line = lines.get(timeout=60)
            if "1 added" in line:
                break
        assert "1 added" in line and "2 images indexed" in line
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0 and "stopped watching" in err
    coll = Collection(idx)
    coll.check()
    assert names(coll) == {"a.png", "b.png"}


def test_an_emptied_folder_or_a_failed_update_never_ends_the_watch(tmp_path):
    photos = tmp_path / "photos"
    for i in range(2):
        write_image(photos / f"{i}.png", seed=i)
    coll = Collection(tmp_path / "idx", INFO)
    fail = [True]
    errors: list[str] = []

    def update():
        if fail and fail.pop():
            raise OSError("database is locked")
        return coll.update(photos, CountingEmbedder(), progress=False)

    stop = threading.Event()
    t = threading.Thread(target=watch, args=(photos, update, 0.1, stop), daemon=True,
                         kwargs={"on_error": errors.append})  # fmt: skip
    t.start()
    try:
        assert wait_for(lambda: any("update failed (database is locked)" in e for e in errors))
        assert wait_for(lambda: len(names(coll)) == 2)  # tried again, and done
        moved = tmp_path / "elsewhere"
        shutil.move(photos, moved)  # the folder is gone (an unmounted share)
        assert wait_for(lambda: any("no photos or videos there any more" in e for e in errors))
        assert len(names(coll)) == 2  # the index kept them
        shutil.move(moved, photos)
        write_image(photos / "2.png", seed=2)
        assert wait_for(lambda: len(names(coll)) == 3)  # and the watch went on
    finally:
        stop.set()
        t.join(timeout=10)


def test_serve_watch_thread_keeps_the_served_index_current(tmp_path):
    from tests.conftest import make_tiny_model
    from vsekit.cli.serve import start_watcher
    from vsekit.index import model_info

    model = make_tiny_model()
    photos = tmp_path / "photos"
    write_image(photos / "a.png", seed=1)
    coll = Collection(tmp_path / "idx", model_info(model, "tiny"))
    stop = start_watcher(coll, model, str(photos))
    try:
        assert wait_for(lambda: names(coll) == {"a.png"})
        write_image(photos / "b.png", seed=2)
        assert wait_for(lambda: names(coll) == {"a.png", "b.png"})
    finally:
        stop.set()


def test_cli_watch_stops_cleanly_on_sigterm_during_its_first_pass(tmp_path):
    """A restarted watcher with much to do got SIGTERM's default action (death at once)
    until its first pass ended: now it stops as Ctrl-C stops it, and says so."""
    import sqlite3

    bundle = make_tiny_model().save(tmp_path / "m")
    photos = tmp_path / "photos"
    for i in range(1500):
        write_image(photos / f"{i:04d}.png", seed=i, size=8)
    idx = tmp_path / "idx"
    script = _vse_script(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, str(script), "index", str(photos), "--index", str(idx), "--model",
         str(bundle), "--watch", "--interval", "0.2", "--quiet", "--batch-size", "1",
         "--no-caption-pool"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip

    def committed() -> int:
        try:
            db = sqlite3.connect(f"file:{idx / 'index.sqlite'}?mode=ro", uri=True)
            try:
                return db.execute("SELECT COUNT(*) FROM files").fetchone()[0]
            finally:
                db.close()
        except sqlite3.Error:
            return 0

    try:  # the event, not the clock: the first pass has committed a batch
        assert wait_for(lambda: committed() > 0, timeout=60)
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "stopped watching (in the first pass" in err
    coll = Collection(idx)
    coll.check()
    assert 0 < len(coll) < 1500  # it was stopped inside the first pass
