"""Fuzz and fault suite: properties the index keeps whatever happens to its files, the
photos' metadata, their content, or the process writing it.

Hypothesis draws the cases, with a fixed seed and a bounded number of examples
(:data:`BUDGET`), so a run is repeatable and takes about a minute:

1. **Same-size damage to every stored file.** Any change to an embeddings file is
   refused at open (every row is checksummed); damaged caches (penalties, FAISS) are
   recomputed, so results equal the undamaged index's; a damaged ``index.sqlite`` is
   either refused with a one-line error or opens. SQLite keeps no checksum of its own
   cells, so a changed byte inside a stored path or date is not detected: a file whose
   size and time no longer match is never served (:meth:`Collection.open_file`) and the
   next ``vse index`` re-embeds it.
2. **Odd metadata.** Modification times from 1653 to 5138 and EXIF values of any bytes
   never stop a batch or fail a file that can be decoded.
3. **Content changes under an index.** After any sequence of rewrites, truncations,
   garbage, deletions, renames and copies, every indexed file's row holds the embedding
   of its current content, its hash is its current content's, and no file that cannot
   be read keeps a row.
4. **kill -9 inside every commit path.** Updates, compaction, repair, cache writes,
   rebuilds and metadata backfills are killed at a drawn write (a SQLite statement or
   commit, a file write, fsync, truncate, rename or unlink); the index then opens,
   checks, holds only correct rows, and one more run gives what a clean build gives.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import sqlite3
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from tests.conftest import write_image
from tests.test_big_index import PixelEmbedder, info
from vsekit.fsio import stored_ns
from vsekit.index import Collection, CollectionError
from vsekit.media.exif import read_meta

BUDGET = settings(
    max_examples=12,
    deadline=None,
    derandomize=True,  # the same cases on every run: CI is never flaky
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
INFO = info("f32")
EMBED = PixelEmbedder()


def _pen(emb: np.ndarray) -> np.ndarray:
    return np.asarray(emb, np.float32)[:, 0] * 0.1


def _embedding_of(path: str) -> np.ndarray:
    with Image.open(path) as im:
        return EMBED([im.convert("RGB")])[0]


def assert_true_to_the_folder(coll: Collection, folder: Path) -> None:
    """Every indexed file exists, its row is its own and holds its current content's
    embedding and hash; every readable photo under ``folder`` is indexed."""
    coll.refresh()
    coll.check()
    snap = coll.snapshot
    assert len(set(snap.rows.tolist())) == len(snap)
    for pos, path in enumerate(snap.paths):
        np.testing.assert_allclose(np.asarray(snap.emb[snap.rows[pos]]), _embedding_of(path),
                                   atol=1e-6)  # fmt: skip
        sha = snap.photo_meta["sha256"][pos]
        assert sha is None or sha == hashlib.sha256(Path(path).read_bytes()).hexdigest()
    readable = set()
    for p in folder.iterdir():
        try:
            _embedding_of(str(p))
            readable.add(str(p))
        except OSError:
            pass
    assert set(snap.paths) == readable


def _results(coll: Collection, queries: np.ndarray) -> list:
    out = []
    for method in ("exact", "faiss"):
        for hits in coll.search(queries, 5, method):
            out.append([(h.path, round(h.score, 5)) for h in hits])
    return out


# ------------------------------------------------------------ 1. same-size damage
@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """An index of 16 photos with its penalty and FAISS caches, and its answers."""
    root = tmp_path_factory.mktemp("built")
    folder = root / "p"
    for i in range(16):
        write_image(folder / f"{i:02d}.png", seed=i, size=8)
    coll = Collection(root / "idx", INFO)
    coll.update(folder, EMBED, progress=False)
    coll.store_caches(penalty=_pen, key="fuzz", faiss=True)
    queries = np.asarray(coll.snapshot.emb[:4]) + 0.01
    want = _results(coll, queries)
    pen = coll.row_penalties(_pen, "fuzz").copy()
    coll.close()
    files = sorted(p.name for p in (root / "idx").iterdir() if p.name != "index.lock")
    return root / "idx", files, queries, want, pen


def _damaged_copy(idx: Path, name: str, at: float, xor: int, run: int, dst: Path) -> Path:
    shutil.copytree(idx, dst)
    f = dst / name
    data = bytearray(f.read_bytes())
    start = min(int(at * len(data)), len(data) - 1)
    for i in range(start, min(start + run, len(data))):
        data[i] ^= xor
    f.write_bytes(bytes(data))
    return dst


DAMAGE = dict(at=st.floats(0, 1), xor=st.integers(1, 255), run=st.integers(1, 8))


@BUDGET
@given(**DAMAGE)
def test_any_change_to_the_embeddings_file_is_refused(built, at, xor, run):
    idx, files, *_ = built
    with tempfile.TemporaryDirectory() as tmp:
        name = next(f for f in files if f.startswith("emb-"))
        copy = _damaged_copy(idx, name, at, xor, run, Path(tmp) / "idx")
        with pytest.raises(CollectionError, match="changed since they were written.*--repair"):
            Collection(copy)


@BUDGET
@given(which=st.sampled_from(["pen-", "faiss-"]), **DAMAGE)
def test_a_damaged_cache_is_recomputed_never_used(built, which, at, xor, run):
    idx, files, queries, want, pen = built
    with tempfile.TemporaryDirectory() as tmp:
        name = next(f for f in files if f.startswith(which))
        coll = Collection(_damaged_copy(idx, name, at, xor, run, Path(tmp) / "idx"))
        assert _results(coll, queries) == want
        np.testing.assert_array_equal(coll.row_penalties(_pen, "fuzz"), pen)
        coll.close()


@BUDGET
@given(**DAMAGE)
def test_a_damaged_database_is_refused_in_one_line_or_opens(built, at, xor, run):
    idx, _, queries, _, _ = built
    with tempfile.TemporaryDirectory() as tmp:
        copy = _damaged_copy(idx, "index.sqlite", at, xor, run, Path(tmp) / "idx")
        try:
            coll = Collection(copy)
            _results(coll, queries)
            coll.close()
        except (CollectionError, sqlite3.DatabaseError) as e:
            assert "\n" not in str(e).strip()


# ------------------------------------------------------------ 2. odd metadata
@BUDGET
@given(seconds=st.lists(st.integers(-(10**10), 10**11), min_size=3, max_size=3))
def test_any_modification_time_is_indexed_and_then_unchanged(seconds):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "p"
        for i, s in enumerate(seconds):
            p = write_image(folder / f"{i}.png", seed=i, size=8)
            with contextlib.suppress(OverflowError, OSError):  # beyond this file system
                os.utime(p, ns=(s * 10**9, s * 10**9))
        coll = Collection(Path(tmp) / "idx", INFO)
        rep = coll.update(folder, EMBED, progress=False)
        assert rep.added == 3 and not rep.failed
        assert coll.update(folder, EMBED, progress=False).unchanged == 3


EXIF_TAGS = {306: "DateTime", 271: "Make", 272: "Model", 36867: "DateTimeOriginal"}


@BUDGET
@given(
    values=st.dictionaries(
        st.sampled_from(sorted(EXIF_TAGS)),
        st.one_of(st.binary(max_size=40), st.text(max_size=40)),
        min_size=1,
    ),  # fmt: skip
    gps=st.one_of(st.none(), st.tuples(st.floats(allow_nan=True), st.floats(), st.floats())),
)
def test_exif_of_any_bytes_costs_at_most_its_fields(values, gps):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "p"
        folder.mkdir()
        exif = Image.Exif()
        for k, v in values.items():
            exif[k] = v
        if gps is not None:
            exif[0x8825] = {2: gps, 1: "N", 4: gps, 3: "W"}
        p = folder / "odd.jpg"
        try:
            Image.new("RGB", (8, 8), (200, 30, 30)).save(p, exif=exif)
        except Exception:  # noqa: BLE001  (Pillow will not write it: nothing to read)
            return
        m = read_meta(p, stored_ns(p.stat().st_mtime_ns))
        assert m.sha256 == hashlib.sha256(p.read_bytes()).hexdigest()
        for text in (m.make, m.model, m.taken):
            assert text is None or text.encode("utf-8")  # storable
        coll = Collection(Path(tmp) / "idx", INFO)
        rep = coll.update(folder, EMBED, progress=False)
        assert rep.added == 1 and not rep.failed


@BUDGET
@given(at=st.integers(0, 400), xor=st.integers(1, 255), run=st.integers(1, 16))
def test_a_damaged_exif_header_never_stops_a_batch(at, xor, run):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "p"
        folder.mkdir()
        exif = Image.Exif()
        exif[306], exif[271], exif[272] = "2019:06:15 10:04:31", "Camera", "Model 1"
        exif[0x8825] = {2: (33.0, 51.0, 21.0), 1: "S", 4: (151.0, 12.0, 40.0), 3: "E"}
        p = folder / "a.jpg"
        Image.new("RGB", (16, 16), (10, 200, 30)).save(p, exif=exif)
        data = bytearray(p.read_bytes())
        for i in range(6 + at, min(6 + at + run, len(data))):  # inside the APP1 segment
            data[i] ^= xor
        p.write_bytes(bytes(data))
        write_image(folder / "b.png", seed=1, size=8)
        read_meta(p, stored_ns(p.stat().st_mtime_ns))  # never raises
        coll = Collection(Path(tmp) / "idx", INFO)
        rep = coll.update(folder, EMBED, progress=False)
        assert rep.added + len(rep.failed) == 2 and str(folder / "b.png") in coll.paths


# ------------------------------------------------------------ 3. content changes
OPS = st.lists(
    st.tuples(st.sampled_from(["rewrite", "truncate", "garbage", "delete", "rename", "copy",
                               "touch"]),  # fmt: skip
              st.integers(0, 5), st.integers(0, 5)),
    min_size=1, max_size=6,
)  # fmt: skip


def _apply(folder: Path, op: str, i: int, j: int, tick: int) -> None:
    src, dst = folder / f"{i}.png", folder / f"{j}.png"
    if op == "rewrite":
        write_image(src, seed=100 + tick, size=8)
    elif op == "truncate" and src.exists():
        src.write_bytes(src.read_bytes()[:20])
    elif op == "garbage" and src.exists():
        src.write_bytes(os.urandom(max(1, src.stat().st_size)))
    elif op == "delete":
        src.unlink(missing_ok=True)
    elif op == "rename" and src.exists() and i != j:
        src.rename(dst)
    elif op == "copy" and src.exists() and i != j:
        shutil.copyfile(src, dst)
    if src.exists() and op != "rename":
        # change detection is by size and mtime (as rsync's): give each change its own
        os.utime(src, ns=(10**18 + tick * 10**9, 10**18 + tick * 10**9))


@BUDGET
@given(rounds=st.lists(OPS, min_size=1, max_size=3))
def test_after_any_changes_every_row_is_true_to_its_file(rounds):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "p"
        for i in range(4):
            write_image(folder / f"{i}.png", seed=i, size=8)
        coll = Collection(Path(tmp) / "idx", INFO)
        coll.update(folder, EMBED, progress=False)
        tick = 0
        for ops in rounds:
            for op, i, j in ops:
                tick += 1
                _apply(folder, op, i, j, tick)
            coll.update(folder, EMBED, progress=False)
            assert_true_to_the_folder(coll, folder)


# ------------------------------------------------------------ 4. kill -9 in commit paths
#: the calls a commit path writes through (C functions, seen by a profiler)
WRITES = {"execute", "executemany", "executescript", "commit", "__exit__", "fsync", "write",
          "truncate", "replace", "rename", "unlink", "ftruncate"}  # fmt: skip


def _in_child(run: Callable[[], None], kill_at: int, counter: Path) -> int:
    """Run ``run`` in a forked child that SIGKILLs itself at its ``kill_at``-th write
    from vsekit code (0: never; the count of writes is then left in ``counter``); the
    child's exit status."""
    pid = os.fork()
    if pid == 0:  # the child: no pytest cleanup, no exception handling past this point
        n = 0

        def prof(frame, event, arg):
            nonlocal n
            if (event == "c_call" and getattr(arg, "__name__", "") in WRITES
                    and "/vsekit/" in frame.f_code.co_filename):  # fmt: skip
                n += 1
                if n == kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)

        code = 0
        try:
            sys.setprofile(prof)
            run()
            sys.setprofile(None)
            counter.write_text(str(n))
        except BaseException:  # noqa: BLE001
            with contextlib.suppress(BaseException):  # kept for the parent's message
                counter.with_suffix(".err").write_text(traceback.format_exc())
            code = 3
        os._exit(code)
    deadline = time.time() + 60
    while time.time() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError("the child did not finish in 60 s")


def _scenario(name: str, root: Path) -> tuple[Callable[[], None], Path]:
    """Prepare ``root`` for the commit path ``name``; the call to kill, and the folder
    the index must end up true to."""
    folder = root / "p"
    for i in range(8):
        write_image(folder / f"{i}.png", seed=i, size=8)
    idx = root / "idx"
    coll = Collection(idx, INFO)
    coll.update(folder, EMBED, batch_size=3, progress=False)
    if name == "add":
        for i in range(8, 14):
            write_image(folder / f"{i}.png", seed=i, size=8)
    elif name in ("compact", "caches"):
        for i in range(5):
            (folder / f"{i}.png").unlink()
        coll.update(folder, EMBED, progress=False)
    elif name == "repair":
        f = idx / "emb-0.f32"
        data = bytearray(f.read_bytes())
        data[64 * 4 * 2 + 3] ^= 0x40
        f.write_bytes(bytes(data))
    elif name == "backfill":
        db = coll.db
        db.execute("DELETE FROM sums")
        db.execute("DELETE FROM photo_meta")
        db.commit()
    elif name == "rebuild":
        write_image(folder / "8.png", seed=8, size=8)
        (folder / "0.png").unlink()
    coll.close()

    def run() -> None:
        if name == "rebuild":
            with Collection.rebuild(idx, INFO) as c:
                c.update(folder, EMBED, batch_size=2, progress=False)
            return
        c = Collection(idx, INFO, repair=name == "repair")
        if name in ("add", "backfill", "repair"):
            c.update(folder, EMBED, batch_size=2, progress=False)
        elif name == "compact":
            c.compact(min_garbage=1)
        elif name == "caches":
            c.store_caches(penalty=_pen, key="fuzz", faiss=True)

    return run, folder


def _how_it_ended(status: int, counter: Path) -> str:
    """Why a child that was to be killed was not, for the failure message."""
    if os.WIFSIGNALED(status):
        return f"it died of signal {os.WTERMSIG(status)}"
    err = counter.with_suffix(".err")
    if err.exists():
        return "it raised:\n" + err.read_text()
    n = counter.read_text() if counter.exists() else "?"
    return f"it exited {os.WEXITSTATUS(status)} after {n} writes"


SCENARIOS = ["add", "compact", "repair", "caches", "rebuild", "backfill"]
WRITE_COUNTS: dict[str, int] = {}


def _writes(name: str) -> int:
    """How many writes the commit path makes when it is not killed."""
    if name not in WRITE_COUNTS:
        with tempfile.TemporaryDirectory() as tmp:
            run, _ = _scenario(name, Path(tmp))
            counter = Path(tmp) / "n"
            assert _in_child(run, 0, counter) == 0
            WRITE_COUNTS[name] = int(counter.read_text())
    return WRITE_COUNTS[name]


@pytest.mark.parametrize("name", SCENARIOS)
@settings(BUDGET, max_examples=6)
@given(point=st.floats(0, 1, exclude_max=True))
def test_kill_9_at_any_write_of_a_commit_path_leaves_a_true_index(name, point):
    total = _writes(name)
    assert total > 3  # the profiler sees this path's writes
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        run, folder = _scenario(name, root)
        kill_at = 1 + int(point * total)
        status = _in_child(run, kill_at, root / "n")
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (
            f"{name}: the child was to be killed at write {kill_at} of {total}, but "
            + _how_it_ended(status, root / "n")
        )
        try:
            coll = Collection(root / "idx", INFO)
        except CollectionError as e:  # only a repair that was killed may still need one
            assert name == "repair" and "--repair" in str(e)
            coll = Collection(root / "idx", INFO, repair=True)
        coll.check()
        snap = coll.snapshot
        for pos, path in enumerate(snap.paths):  # no row holds another file's embedding
            if not os.path.exists(path):
                continue  # deleted before the run: the next update removes it
            np.testing.assert_allclose(np.asarray(snap.emb[snap.rows[pos]]),
                                       _embedding_of(path), atol=1e-6)  # fmt: skip
        coll.update(folder, EMBED, progress=False)  # one more run: as a clean build
        assert_true_to_the_folder(coll, folder)
        coll.close()
