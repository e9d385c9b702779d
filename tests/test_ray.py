"""`vse index --ray` on a local Ray cluster with 2 worker processes: the same rows as
the single-process path, bad files reported and skipped, a worker killed mid-job
replaced, and a killed job resumed at block granularity."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from tests.conftest import write_image
from vsekit.index import Collection, model_info

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def local_cluster():
    # one GPU declared, none there: the GPU replicas' refusals are tested on this CPU
    ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture
def setup(tmp_path):
    import vsekit

    # the shipped default: the workers are other processes, where the test suite's tiny
    # test backbone is not registered
    bundle = "default"
    photos = tmp_path / "photos"
    for i in range(30):
        write_image(photos / f"{i:02d}.jpg", seed=i)
    (photos / "broken.jpg").write_bytes(b"not a jpeg")
    model = vsekit.load_model(bundle)
    return bundle, photos, model, model_info(model, bundle)


def rows_by_path(coll: Collection) -> dict[str, np.ndarray]:
    snap = coll.snapshot
    return {p: snap.embedding_of(i) for i, p in zip(snap.ids, snap.paths, strict=True)}


def source(bundle, model, batch_size: int = 1):
    from vsekit.index.ray_index import ray_batches

    dim = model_info(model, bundle)["dim"]
    return ray_batches(str(bundle), dim, model.decode_size, True, batch_size,
                       workers=2)  # fmt: skip


def test_ray_rows_equal_the_single_process_rows(local_cluster, setup, tmp_path):
    bundle, photos, model, info = setup
    local = Collection(tmp_path / "local", info)
    local.update(photos, model.encode_image, progress=False)
    remote = Collection(tmp_path / "ray", info)
    rep = remote.update(photos, model.encode_image, 4, progress=False,
                        batches=source(bundle, model, 4))  # fmt: skip
    assert (rep.added, len(rep.failed)) == (30, 1)
    assert rep.failed[0][0].endswith("broken.jpg") and "not an image" in rep.failed[0][1]
    a, b = rows_by_path(local), rows_by_path(remote)
    assert a.keys() == b.keys() and len(a) == 30
    assert max(float(np.abs(a[p] - b[p]).max()) for p in a) <= 1e-6
    again = remote.update(photos, model.encode_image, progress=False,
                          batches=source(bundle, model))  # fmt: skip
    assert again.unchanged == 30 and again.embedded == 0  # the failed file is remembered
    q = model.encode_text("a photo")
    assert [h.path for h in local.search(q, 5)[0]] == [h.path for h in remote.search(q, 5)[0]]


def embedder_pids() -> list[int]:
    """The Ray worker processes running an Embedder actor (by their process title)."""
    pids = []
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/cmdline", "rb") as fh:
                if b"MapWorker(MapBatches(Embedder))" in fh.read():
                    pids.append(int(d))
        except (OSError, ValueError):
            continue
    return pids


def test_a_worker_killed_mid_job_is_replaced(local_cluster, setup, tmp_path):
    bundle, photos, model, info = setup
    killed = []

    def kill_one(done: int) -> None:
        if killed:
            return
        pids = embedder_pids()
        assert pids, "no Embedder actor is running"
        os.kill(pids[0], signal.SIGKILL)
        killed.append((done, pids[0]))

    coll = Collection(tmp_path / "idx", info)
    rep = coll.update(photos, model.encode_image, 1, progress=False, on_batch=kill_one,
                      batches=source(bundle, model))  # fmt: skip
    assert killed and killed[0][0] < 31  # killed after the first block, before the end
    assert rep.added == 30 and len(coll) == 30 and len(rep.failed) == 1


def test_a_killed_job_resumes_with_only_the_uncommitted_blocks(local_cluster, setup, tmp_path):
    bundle, photos, model, info = setup

    class Killed(Exception):
        pass

    def die(done: int) -> None:
        if done >= 10:
            raise Killed  # the driver dies after committing 10 files

    coll = Collection(tmp_path / "idx", info)
    with pytest.raises(Killed):
        coll.update(photos, model.encode_image, 1, progress=False, on_batch=die,
                    batches=source(bundle, model))  # fmt: skip
    coll = Collection(tmp_path / "idx")
    kept = len(coll)
    assert 9 <= kept <= 10  # every committed block survives (the broken file is a block)
    rep = coll.update(photos, model.encode_image, 1, progress=False,
                      batches=source(bundle, model))  # fmt: skip
    assert rep.added == 30 - kept and rep.embedded == 30 - kept and len(coll) == 30


def test_cli_ray_flags(local_cluster, setup, tmp_path, capsys):
    from vsekit.cli import main

    bundle, photos, _, _ = setup
    idx = str(tmp_path / "idx")
    run = ["index", str(photos), "--model", str(bundle), "--index", idx, "--quiet"]
    assert main([*run, "--workers", "2"]) == 2
    assert (
        "--workers, --cpus-per-worker and --gpus-per-worker go with --ray"
        in capsys.readouterr().err
    )
    assert main([*run, "--ray", "auto", "--workers", "2", "--batch-size", "8"]) == 0
    assert "30 added" in capsys.readouterr().out


def test_features_extract_on_ray_equals_the_local_store(local_cluster, tmp_path):
    """`vse features extract --ray`: the store's rows bit-identical to the single-process
    path's, bad files reported, and a killed job resumed after its last committed block."""
    from tests.test_features import Killed, make_items
    from vsekit.lab.features.backbones import create_backbone
    from vsekit.lab.features.extract import ExtractItem, extract_to_store, failed_images
    from vsekit.lab.features.ray_extract import ray_blocks

    items = make_items(tmp_path / "img", 10, 3)
    (tmp_path / "img" / "notes.jpg").write_text("not a JPEG")
    items.insert(4, ExtractItem("notes.jpg", tmp_path / "img" / "notes.jpg", "train"))
    model = create_backbone("efficientnet-lite0")  # installed by pip: workers have it too
    kw = dict(crops=1, batch_size=3, progress=False)
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each replica runs (cpus_per_worker=1): the same kernels
    try:
        local = extract_to_store(items, tmp_path / "local", model, workers=0, **kw)
    finally:
        torch.set_num_threads(threads)
    blocks = ray_blocks(model, workers=2)

    def kill(done: int) -> None:
        if done >= 6:
            raise Killed

    with pytest.raises(Killed):
        extract_to_store(items, tmp_path / "ray", model, on_batch=kill, blocks=blocks, **kw)
    remote = extract_to_store(items, tmp_path / "ray", model, blocks=blocks, **kw)
    assert remote.n == local.n == 13
    for name in ("pooled.f32", "rmac.f32", "ids.txt", "splits.txt"):
        assert (local.path / name).read_bytes() == (remote.path / name).read_bytes(), name
    assert [f["id"] for f in failed_images(remote.path)] == ["notes.jpg"]
    assert [(r["from"], r["images"]) for r in remote.meta["runs"]] == [(0, 6), (6, 8)]


def test_a_worker_with_another_model_refuses_in_one_line(local_cluster, setup, tmp_path):
    from vsekit.index.ray_index import ray_batches

    bundle, photos, model, info = setup
    dim = info["dim"]
    wrong = ray_batches(bundle, dim, model.decode_size, True, 8, workers=1, fingerprint="other")
    coll = Collection(tmp_path / "idx", info)
    with pytest.raises(RuntimeError, match="the Ray job failed: .*install the same vsekit"):
        coll.update(photos, model.encode_image, 8, progress=False, batches=wrong)
    assert len(coll) == 0


def test_gpu_replicas_refuse_where_there_is_no_gpu(local_cluster, setup, tmp_path, capsys):
    """``--gpus-per-worker``: each replica is scheduled on a GPU share (the cluster
    declares one) and runs its model there, or refuses in one line; never a quiet CPU run,
    and nothing is committed. (No GPU here: the runs themselves are not tested.)"""
    from vsekit.cli import main
    from vsekit.index.ray_index import ray_batches
    from vsekit.lab.features.backbones import create_backbone
    from vsekit.lab.features.extract import extract_to_store
    from vsekit.lab.features.ray_extract import ray_blocks

    bundle, photos, model, info = setup
    gpu = ray_batches(bundle, info["dim"], model.decode_size, True, 8, workers=1,
                      gpus_per_worker=1)  # fmt: skip
    coll = Collection(tmp_path / "idx", info)
    with pytest.raises(RuntimeError, match="the Ray job failed: .*no CUDA provider"):
        coll.update(photos, model.encode_image, 8, progress=False, batches=gpu)
    assert len(coll) == 0

    from tests.test_features import make_items

    items = make_items(tmp_path / "img", 4, 2)
    blocks = ray_blocks(create_backbone("efficientnet-lite0"), workers=1, gpus_per_worker=1)
    with pytest.raises(RuntimeError, match="the Ray job failed: .*PyTorch sees none"):
        extract_to_store(items, tmp_path / "store", create_backbone("efficientnet-lite0"),
                         crops=1, batch_size=2, progress=False, blocks=blocks)  # fmt: skip

    run = ["index", str(photos), "--model", str(bundle), "--index", str(tmp_path / "i2")]
    assert main([*run, "--gpus-per-worker", "1"]) == 2
    assert "go with --ray" in capsys.readouterr().err
