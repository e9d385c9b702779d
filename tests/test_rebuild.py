"""``vse index --rebuild``: built beside the live index under its writer lock, swapped in
by one rename, and never destructive when it fails or meets another writer."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_faults import ROOT, assert_consistent, photos_in
from tests.test_index import INFO, CountingEmbedder
from vsekit.index import Collection, CollectionError
from vsekit.index.files import DB_NAME, REBUILD_NAME

OTHER = {**INFO, "name": "other", "fingerprint": "0ther"}

WRITER = """
import sys
sys.path.insert(0, {root!r})
from tests.test_index import CountingEmbedder, INFO
from vsekit.index import Collection
c = Collection({idx!r}, INFO)
class Loud(CountingEmbedder):
    def __call__(self, images):
        print("batch", flush=True)
        return super().__call__(images)
rep = c.update({photos!r}, Loud(delay={delay}), batch_size=1, progress=False)
print(rep.summary(), flush=True)
print("added", rep.added, flush=True)
"""

REBUILDER = """
import os, sys, time
sys.path.insert(0, {root!r})
from tests.test_index import CountingEmbedder, INFO
from vsekit.index import Collection
class Loud(CountingEmbedder):
    def __call__(self, images):
        print("batch", flush=True)
        t0 = time.monotonic()  # with a gate: hold the lock until the test opens it
        while {gate!r} and not os.path.exists({gate!r}) and time.monotonic() - t0 < 60:
            time.sleep(0.02)
        return super().__call__(images)
with Collection.rebuild({idx!r}, INFO) as c:
    c.update({photos!r}, Loud(delay={delay}), batch_size=1, progress=False)
print("rebuilt", flush=True)
"""


def _spawn(
    template: str, idx: Path, photos: Path, delay: float, gate: str = ""
) -> subprocess.Popen:
    script = template.format(root=str(ROOT), idx=str(idx), photos=str(photos), delay=delay,
                             gate=gate)  # fmt: skip
    return subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _names(coll: Collection) -> set[str]:
    coll.refresh()
    return {Path(p).name for p in coll.paths}


def test_rebuild_waits_for_a_running_writer_then_replaces_its_index(tmp_path):
    """The reported failure: `vse index BIG & vse index SMALL --rebuild`. The rebuild
    waits for the lock, so the writer's rows are committed whole, then replaced whole."""
    big, small = photos_in(tmp_path / "big", 12), photos_in(tmp_path / "small", 3, start=50)
    idx = tmp_path / "idx"
    Collection(idx, INFO).close()
    writer = _spawn(WRITER, idx, big, delay=0.05)
    assert writer.stdout.readline().strip() == "batch"  # holds the lock, mid-update
    with Collection.rebuild(idx, INFO) as coll:
        coll.update(small, CountingEmbedder(), progress=False)
    out, err = writer.communicate(timeout=60)
    assert writer.returncode == 0, err
    assert out.strip().endswith("added 12")  # it finished before the rebuild began
    coll = Collection(idx, INFO)
    assert _names(coll) == {f"{i:03d}.png" for i in range(50, 53)}
    assert_consistent(coll, small)
    assert sorted(p.name for p in idx.glob("emb-*.f32")) == ["emb-1.f32"]


def test_writer_that_waited_for_a_rebuild_adds_to_the_new_index(tmp_path):
    """The other order: a writer that opened the old index and waited for the lock
    reopens the rebuilt database, so its rows land in the new index, none shared."""
    big, small = photos_in(tmp_path / "big", 6), photos_in(tmp_path / "small", 3, start=50)
    idx = tmp_path / "idx"
    coll = Collection(idx, INFO)
    coll.update(photos_in(tmp_path / "old", 2, start=90), CountingEmbedder(), progress=False)
    gate = tmp_path / "gate"  # the rebuild holds its lock until the writer is waiting
    rebuilder = _spawn(REBUILDER, idx, small, delay=0.0, gate=str(gate))
    assert rebuilder.stdout.readline().strip() == "batch"
    writer = _spawn(WRITER, idx, big, delay=0.0)
    first = writer.stderr.readline()
    assert "waiting" in first  # it really waited for the rebuild's lock
    gate.touch()
    out, err = rebuilder.communicate(timeout=60)
    assert rebuilder.returncode == 0, err
    out, err = writer.communicate(timeout=60)
    assert writer.returncode == 0, first + err
    assert "rebuilt by another process while this one waited" in out
    assert "6 added" in out
    want = {f"{i:03d}.png" for i in [*range(6), *range(50, 53)]}
    assert _names(coll) == want  # the reader reopened the new database too
    assert_consistent(coll, big)


def test_a_reader_sees_the_old_index_during_a_rebuild_and_the_new_one_after(tmp_path):
    idx = tmp_path / "idx"
    old, new = photos_in(tmp_path / "old", 4), photos_in(tmp_path / "new", 2, start=40)
    reader = Collection(idx, INFO)
    reader.update(old, CountingEmbedder(), progress=False)
    seen_during = []

    def watch(n: int) -> None:
        seen_during.append(_names(reader))

    with Collection.rebuild(idx, INFO) as coll:
        coll.update(new, CountingEmbedder(), batch_size=1, progress=False, on_batch=watch)
        assert _names(reader) == {f"{i:03d}.png" for i in range(4)}
    assert seen_during and all(s == {f"{i:03d}.png" for i in range(4)} for s in seen_during)
    assert _names(reader) == {"040.png", "041.png"}
    assert_consistent(reader, new)


def test_a_failed_rebuild_leaves_the_old_index_and_nothing_else(tmp_path):
    idx = tmp_path / "idx"
    folder = photos_in(tmp_path / "p", 5)
    coll = Collection(idx, INFO)
    coll.update(folder, CountingEmbedder(), progress=False)
    before = sorted(p.name for p in idx.iterdir())

    def boom(images):
        raise RuntimeError("out of memory")

    with pytest.raises(RuntimeError), Collection.rebuild(idx, INFO) as new:
        new.update(photos_in(tmp_path / "q", 3, start=20), boom, progress=False)
    assert sorted(p.name for p in idx.iterdir()) == before
    assert len(Collection(idx, INFO)) == 5
    assert_consistent(coll, folder)


def test_a_rebuild_killed_midway_leaves_the_old_index_and_is_cleaned_up(tmp_path):
    idx = tmp_path / "idx"
    folder = photos_in(tmp_path / "p", 5)
    coll = Collection(idx, INFO)
    coll.update(folder, CountingEmbedder(), progress=False)
    proc = _spawn(REBUILDER, idx, photos_in(tmp_path / "q", 8, start=20), delay=0.5)
    assert proc.stdout.readline().strip() == "batch"
    time.sleep(0.8)  # at least one batch committed to the rebuild's files
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert (idx / REBUILD_NAME).exists()  # the leftovers are really there
    assert len(Collection(idx, INFO)) == 5
    assert_consistent(coll, folder)
    coll.update(folder, CountingEmbedder(), progress=False)  # the next writer cleans up
    assert not (idx / REBUILD_NAME).exists()
    assert sorted(p.name for p in idx.glob("emb-*.f32")) == ["emb-0.f32"]


def test_rebuild_with_another_model_fails_old_readers_with_one_line(tmp_path):
    idx = tmp_path / "idx"
    reader = Collection(idx, INFO)
    reader.update(photos_in(tmp_path / "p", 3), CountingEmbedder(), progress=False)
    with Collection.rebuild(idx, OTHER) as coll:
        coll.update(photos_in(tmp_path / "q", 2, start=9), CountingEmbedder(), progress=False)
    for _ in range(2):  # every call, not only the first
        with pytest.raises(CollectionError, match="built with model 'other'"):
            reader.refresh()
    assert Collection(idx, OTHER).model_name == "other"


def test_a_process_opened_without_model_info_keeps_its_model(tmp_path):
    """`vse serve` opens its index without model info: after a rebuild with another
    model it must neither search nor add to the new index with its own model."""
    idx = tmp_path / "idx"
    Collection(idx, INFO).update(photos_in(tmp_path / "p", 3), CountingEmbedder(),
                                 progress=False)  # fmt: skip
    served = Collection(idx)  # as open_collection does
    with Collection.rebuild(idx, OTHER) as coll:
        coll.update(photos_in(tmp_path / "q", 2, start=9), CountingEmbedder(), progress=False)
    for _ in range(2):
        with pytest.raises(CollectionError, match="built with model 'other'"):
            served.refresh()
    with pytest.raises(CollectionError, match="built with model 'other'"):
        served.update(tmp_path / "p", CountingEmbedder(), progress=False)
    assert len(Collection(idx, OTHER)) == 2  # nothing of the old model's added


def test_a_snapshot_taken_on_the_old_connection_after_a_swap_is_the_new_one(tmp_path):
    """The window between a reader's check and its read: the old database's embeddings
    are gone; the snapshot is read again from the new database, never empty."""
    idx = tmp_path / "idx"
    reader = Collection(idx, INFO)
    reader.update(photos_in(tmp_path / "p", 3), CountingEmbedder(), progress=False)
    with Collection.rebuild(idx, INFO) as coll:
        coll.update(photos_in(tmp_path / "q", 2, start=9), CountingEmbedder(), progress=False)
    snap = reader.store.snapshot()  # straight on the old connection, no refresh first
    assert len(snap) == 2 and len(snap.emb) == snap.n_rows == 2


def test_rebuild_deletes_only_files_named_as_the_index_names_them(tmp_path):
    idx = tmp_path / "idx"
    Collection(idx, INFO).update(photos_in(tmp_path / "p", 2), CountingEmbedder(),
                                 progress=False)  # fmt: skip
    keep = ["faiss-ivf.index", "emb-notes.f32", "pen-old.f32", "emb-1.f32.bak"]
    for n in keep:
        (idx / n).write_bytes(b"a user's file")
    with Collection.rebuild(idx, INFO) as coll:
        coll.update(photos_in(tmp_path / "q", 2, start=5), CountingEmbedder(), progress=False)
    assert all((idx / n).read_bytes() == b"a user's file" for n in keep)
    assert sorted(p.name for p in idx.glob("emb-*.f32")) == ["emb-1.f32", "emb-notes.f32"]


def test_rebuild_replaces_a_damaged_database_and_deletes_only_index_files(tmp_path):
    """`--index ~/Photos --rebuild` by mistake, or a damaged index: only the index's own
    files are replaced; nothing else in the folder is touched."""
    idx = tmp_path / "idx"
    idx.mkdir()
    (idx / DB_NAME).write_bytes(b"garbage, not sqlite" * 10)
    (idx / "holiday.jpg").write_bytes(b"a user's file")
    with pytest.raises(CollectionError, match="damaged"):
        Collection(idx, INFO)
    with Collection.rebuild(idx, INFO) as coll:
        coll.update(photos_in(tmp_path / "p", 2), CountingEmbedder(), progress=False)
    assert (idx / "holiday.jpg").read_bytes() == b"a user's file"
    assert len(Collection(idx, INFO)) == 2


def test_cli_rebuild_keeps_the_old_index_when_the_folder_is_missing(tmp_path, capsys):
    from vsekit.cli import main

    idx = tmp_path / "idx"
    coll = Collection(idx, INFO)
    coll.update(photos_in(tmp_path / "p", 2), CountingEmbedder(), progress=False)
    assert main(["index", str(tmp_path / "nope"), "--index", str(idx), "--rebuild"]) != 0
    assert "not a folder" in capsys.readouterr().err
    assert len(Collection(idx, INFO)) == 2


def test_nonfinite_rows_are_detected_at_open_and_repaired(tmp_path):
    """Random bytes (here a NaN) in `emb-*.f32` made a photo silently disappear."""
    import numpy as np

    from vsekit.index.snapshot import emb_path

    folder = photos_in(tmp_path / "p", 6)
    coll = Collection(tmp_path / "idx", INFO)
    coll.update(folder, CountingEmbedder(), progress=False)
    coll.close()
    f = emb_path(tmp_path / "idx", 0)
    emb = np.fromfile(f, np.float32).reshape(-1, 4)
    emb[3, 1] = np.nan
    emb.tofile(f)
    with pytest.raises(
        CollectionError, match="1 embeddings changed since they were written.*--repair"
    ):
        Collection(tmp_path / "idx", INFO)
    coll = Collection(tmp_path / "idx", INFO, repair=True)
    embedder = CountingEmbedder()
    coll.update(folder, embedder, progress=False)
    assert embedder.seen == 1  # only the damaged photo re-embedded
    assert len(coll) == 6
    assert_consistent(coll, folder)
