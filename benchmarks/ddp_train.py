"""Training step time on one process against two (DistributedDataParallel, gloo, the
global batch's negatives gathered on every rank), on this machine's two cores.

The model: a GRU-512 text encoder (300-d word vectors) over real Flickr8k training
captions and a linear image side from 2,048-d features (random: the step's cost does
not depend on their values). VSE++'s max-of-hinges loss, global batch 128, Adam. One
process runs with 2 threads; two processes with 1 thread each, so both use the two
cores. Rounds alternate (one, two, one, two); each round times 20 steps after 3 warm-up
steps; medians.

Run: python benchmarks/ddp_train.py [--rounds 2] [--steps 20]
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import record  # noqa: E402

FLICKR8K = Path(__file__).resolve().parents[2] / "shared" / "data" / "flickr8k"
BATCH, IMG_DIM = 128, 2048


def _model_and_data():
    from vsekit.lab.data import load_dataset
    from vsekit.lab.models.joint import JointConfig, JointEmbedding
    from vsekit.lab.text.encoders import TextEncoderConfig
    from vsekit.text.tokenizer import tokenize
    from vsekit.text.vocab import Vocabulary

    train = load_dataset(FLICKR8K).split("train")
    texts = list(train.texts)
    vocab = Vocabulary.build([tokenize(t) for t in texts[:20000]])
    torch.manual_seed(0)
    cfg = JointConfig(text=TextEncoderConfig(kind="gru", word_dim=300, embed_dim=512))
    model = JointEmbedding(IMG_DIM, vocab, cfg)
    feats = torch.randn(len(texts), IMG_DIM)
    return model, feats, texts


def _steps(rank: int, world: int, port: int, steps: int, out: str) -> None:
    import torch.distributed as dist

    from vsekit.lab.losses import create_loss
    from vsekit.lab.train.distributed import from_env, global_loss, shard

    torch.set_num_threads(2 // world)
    if world > 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                          WORLD_SIZE=str(world))  # fmt: skip
    d = from_env(torch.device("cpu"))
    model, feats, texts = _model_and_data()
    fwd = model.training_outputs
    if world > 1:
        from vsekit.lab.train.trainer import _TrainingOutputs

        fwd = torch.nn.parallel.DistributedDataParallel(_TrainingOutputs(model))
    opt = torch.optim.Adam(model.parameters(), 2e-4)
    loss_fn = create_loss("max_hinge", margin=0.2)
    rng = np.random.default_rng(0)
    times = []
    for k in range(steps + 3):
        rows = rng.choice(len(texts), BATCH, replace=False)[shard(BATCH, d)]
        t0 = time.perf_counter()
        img, txt = fwd(feats[rows], [texts[j] for j in rows])
        loss = global_loss(loss_fn, img, txt, torch.from_numpy(rows), d)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if k >= 3:
            times.append(time.perf_counter() - t0)
    if rank == 0:
        np.save(Path(out) / f"world{world}.npy", np.asarray(times))
    if world > 1:
        dist.destroy_process_group()


def main() -> None:
    import torch.multiprocessing as mp

    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    out = tempfile.mkdtemp()
    res: dict[int, list[float]] = {1: [], 2: []}
    for _ in range(args.rounds):
        for world in (1, 2):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            mp.spawn(_steps, args=(world, port, args.steps, out), nprocs=world, join=True)
            res[world] += np.load(Path(out) / f"world{world}.npy").tolist()
    med = {w: float(np.median(t)) for w, t in res.items()}
    r = record(
        Path(__file__).with_suffix(".json"),
        {
            "command": "python benchmarks/ddp_train.py " + " ".join(sys.argv[1:]),
            "global_batch": BATCH,
            "model": "GRU-512 (300-d words), 512-d joint space, 2,048-d image features",
            "loss": "max_hinge, global-batch negatives",
            "steps_timed": {str(w): len(t) for w, t in res.items()},
            "step_ms_median": {str(w): round(m * 1000, 1) for w, m in med.items()},
            "pairs_per_s": {str(w): round(BATCH / m, 1) for w, m in med.items()},
            "two_processes_vs_one": round(med[1] / med[2], 2),
        },
    )
    print(r["step_ms_median"], r["two_processes_vs_one"])


if __name__ == "__main__":
    main()
