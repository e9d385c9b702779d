"""Global-batch negatives across processes: with 2 gloo processes, each computing its
shard, the loss and the (averaged) gradients equal one process's on the same global
batch, same-image masking across ranks included."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import numpy as np
import pytest
import torch

from vsekit.lab.losses import create_loss
from vsekit.lab.train.distributed import Dist, from_env, global_loss, shard

CAPTIONS = ["a dog runs on grass", "a red car", "two people in the snow", "a red dog",
            "a cat on a sofa", "a man rides a bike", "children play", "a boat at sea",
            "a dog in the snow"]  # fmt: skip
# global batch: 9 pairs, images 0..5 with 0 and 3 repeated (two captions of one image)
IMAGE_IDS = [0, 1, 2, 3, 0, 4, 3, 5, 2]


def _setup(loss: str):
    from tests.conftest import make_tiny_model

    model = make_tiny_model(CAPTIONS, seed=3).model.float()
    torch.manual_seed(7)
    feats = torch.randn(6, 5)
    ids = torch.tensor(IMAGE_IDS)
    return model, feats[ids], list(CAPTIONS), ids, create_loss(loss, margin=0.2)


def _grads(model) -> dict[str, np.ndarray]:
    return {n: p.grad.detach().numpy().copy() for n, p in model.named_parameters()
            if p.grad is not None}  # fmt: skip


def _worker(rank: int, world: int, port: int, loss: str, out: str) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world))  # fmt: skip
    torch.set_num_threads(1)
    d = from_env(torch.device("cpu"))
    model, feats, texts, ids, loss_fn = _setup(loss)
    sl = shard(len(ids), d)
    img, txt = model.training_outputs(feats[sl], texts[sl])
    scaled = global_loss(loss_fn, img, txt, ids[sl], d)
    scaled.backward()
    for p in model.parameters():  # what DistributedDataParallel does: the mean over ranks
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad /= world
    np.savez(Path(out) / f"rank{rank}.npz", loss=float(scaled) / world,
             **{k.replace(".", "/"): v for k, v in _grads(model).items()})  # fmt: skip
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("loss", ["max_hinge", "sum_hinge"])
def test_two_processes_equal_one_on_the_global_batch(tmp_path, loss):
    import torch.multiprocessing as mp

    model, feats, texts, ids, loss_fn = _setup(loss)
    img, txt = model.training_outputs(feats, texts)
    ref = loss_fn(img, txt, image_ids=ids)
    ref.backward()
    want = _grads(model)
    mp.spawn(_worker, args=(2, _free_port(), loss, str(tmp_path)), nprocs=2, join=True)
    for rank in (0, 1):
        got = np.load(tmp_path / f"rank{rank}.npz")
        assert float(got["loss"]) == pytest.approx(float(ref), rel=1e-5)
        for name, g in want.items():
            np.testing.assert_allclose(got[name.replace(".", "/")], g, rtol=1e-4, atol=1e-6)


def test_without_the_gather_the_hardest_negatives_differ():
    """The control: each rank's shard alone (what plain DDP would use) is a different
    loss, so the test above can fail."""
    model, feats, texts, ids, loss_fn = _setup("max_hinge")
    img, txt = model.training_outputs(feats, texts)
    full = float(loss_fn(img, txt, image_ids=ids))
    local = sum(float(loss_fn(img[s], txt[s], image_ids=ids[s]))
                for s in (shard(9, Dist(0, 2)), shard(9, Dist(1, 2))))  # fmt: skip
    assert abs(full - local) > 1e-3


def test_shards_cover_the_batch_once():
    for n in (1, 2, 7, 9, 64):
        for world in (1, 2, 3, 4):
            rows = [r for k in range(world) for r in range(n)[shard(n, Dist(k, world))]]
            assert rows == list(range(n))


# ------------------------------------------------------------------ the trainer, end to end
def _train_worker(rank: int, world: int, port: int, run: str, epochs: int, resume: bool) -> None:
    from tests.test_train import make_data, small_cfg
    from vsekit.lab.train.trainer import Trainer

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(rank))  # fmt: skip
    cfg = small_cfg(epochs=epochs, curriculum="sum_then_max", curriculum_sum_epochs=2,
                    batch_size=16)  # fmt: skip
    Trainer(cfg, make_data(), run, progress=False).fit(resume=resume)
    import torch.distributed as dist

    dist.destroy_process_group()


def _last_weights(run: Path) -> dict:
    import json

    from safetensors.torch import load_file

    ptr = json.loads((run / "last.json").read_text())["path"]
    return load_file(str(run / ptr / "model.safetensors"))


def _log_checkpoint_calls(monkeypatch) -> list[str]:
    """The order of checkpoint reads ("load"), writes ("save") and barriers, as a
    one-process run makes them."""
    from vsekit.lab.train import checkpoint
    from vsekit.lab.train.trainer import Trainer

    calls: list[str] = []
    load, save = checkpoint.load_model_weights, checkpoint.save_epoch

    def logged(name, fn):
        def call(*a, **kw):
            calls.append(name)
            return fn(*a, **kw)

        return call

    monkeypatch.setattr(checkpoint, "load_model_weights", logged("load", load))
    monkeypatch.setattr(checkpoint, "save_epoch", logged("save", save))
    monkeypatch.setattr(Trainer, "_barrier", lambda self: calls.append("barrier"))
    return calls


def test_the_switch_waits_for_every_rank_to_read_the_best_epoch(tmp_path, monkeypatch):
    """At the switch to the max of hinges every rank reloads the best sum epoch, and then
    rank 0 rewrites this epoch's folder, which may be that one: a barrier between the
    two, or a rank still reading finds the folder gone (the two-process test below
    failed so now and then). The order of the calls, in one process."""
    from tests.test_train import make_data, small_cfg
    from vsekit.lab.train.trainer import Trainer

    calls = _log_checkpoint_calls(monkeypatch)
    cfg = small_cfg(epochs=3, curriculum="sum_then_max", curriculum_sum_epochs=2, batch_size=16)
    Trainer(cfg, make_data(), tmp_path / "run", progress=False).fit()
    at = calls.index("load")  # the switch's reload: the run does not resume
    assert calls[at + 1] == "barrier", calls


def test_a_resume_waits_for_every_rank_to_read_the_last_epoch(tmp_path, monkeypatch):
    """A resumed run with no epoch left saves at once, rewriting the last epoch's folder
    that every rank has just read: a barrier between the read and the save."""
    from tests.test_train import make_data, small_cfg
    from vsekit.lab.train.trainer import Trainer

    cfg = small_cfg(epochs=2, batch_size=16)
    Trainer(cfg, make_data(), tmp_path / "run", progress=False).fit()
    calls = _log_checkpoint_calls(monkeypatch)
    Trainer(cfg, make_data(), tmp_path / "run", progress=False).fit(resume=True)
    assert calls[0] == "load" and calls[1] == "barrier" and "save" in calls, calls


@pytest.mark.slow
def test_a_two_process_run_trains_as_one_process_does(tmp_path):
    """The curriculum (sum, then max from the best sum checkpoint), checkpoints written by
    rank 0 and read by both, and resume: 2 processes end with one process's weights."""
    import json

    import torch.multiprocessing as mp

    from tests.test_train import make_data, small_cfg
    from vsekit.lab.train.trainer import Trainer

    cfg = small_cfg(epochs=4, curriculum="sum_then_max", curriculum_sum_epochs=2, batch_size=16)
    Trainer(cfg, make_data(), tmp_path / "one", progress=False).fit()
    mp.spawn(_train_worker, args=(2, _free_port(), str(tmp_path / "two"), 2, False), nprocs=2)
    mp.spawn(_train_worker, args=(2, _free_port(), str(tmp_path / "two"), 4, True), nprocs=2)
    one, two = _last_weights(tmp_path / "one"), _last_weights(tmp_path / "two")
    for k in one:
        torch.testing.assert_close(two[k], one[k], rtol=1e-4, atol=1e-5)
    rows = [json.loads(r) for r in (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()]
    ref = [json.loads(r) for r in (tmp_path / "one" / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [0, 1, 2, 3]  # one log, from rank 0
    assert [r["phase"] for r in rows] == [r["phase"] for r in ref] == ["sum", "sum", "max", "max"]
    for a, b in zip(rows, ref, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4)
        assert a["rsum"] == pytest.approx(b["rsum"], abs=0.5)


@pytest.mark.slow
def test_vse_train_nproc_2_from_a_raw_folder(tmp_path):
    """`vse train CONFIG --nproc 2` runs torchrun with 2 processes (gloo) and gives the
    run a one-process `vse train` gives, within float tolerance."""
    import subprocess
    import sys

    from tests.test_faults import ROOT
    from tests.test_train import write_flickr8k_folder

    root = write_flickr8k_folder(tmp_path / "f8k", n=12, n_train=8)
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"""
name: tiny
data: {{root: {root}, store: {tmp_path / "store"}, backbone: tiny-test, crops: 1, weights: random,
        features: fne}}
model: {{text: {{kind: gru, word_dim: 8, embed_dim: 16}}}}
loss: {{name: max_hinge, margin: 0.2}}
train: {{epochs: 2, batch_size: 4, lr: 0.001, collapse_epochs: 0, threads: 1}}
""")
    # the tiny test backbone registers on import: a sitecustomize-free way is a wrapper
    vse = tmp_path / "vse_main.py"
    vse.write_text(f"import sys\nsys.path.insert(0, {str(ROOT)!r})\nimport tests.conftest\n"
                   "from vsekit.cli import main\nsys.exit(main())\n")  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    one = subprocess.run([sys.executable, str(vse), "train", str(cfg), "--run-dir",
                          str(tmp_path / "one")], env=env, capture_output=True,
                         text=True)  # fmt: skip
    assert one.returncode == 0, one.stderr[-2000:]
    two = subprocess.run([sys.executable, str(vse), "train", str(cfg), "--run-dir",
                          str(tmp_path / "two"), "--nproc", "2"], env=env, capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert two.returncode == 0, two.stderr[-2000:]
    assert two.stdout.count("2 epochs in") == 1  # one report, from rank 0
    a, b = _last_weights(tmp_path / "one"), _last_weights(tmp_path / "two")
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-4, atol=1e-5)
