"""The order similarity's tiled values and fused training gradient against the path
they replaced (2026-11-27): the formula in 64 MB chunks of images, autograd through it.

Protocol (the order pipelines, SOE / MOE / POE, in the fair claims grid; ``vse search``
with an order model):

1. The similarity alone: ``S(img, txt)`` and its backward for a batch of 128 pairs in a
   512-d joint space, the image side in bf16 (autocast) and the captions in float32,
   absolute values first (``abs: true``), as the fair grid's order rows train.
2. A whole training step of such a row: ``JointEmbedding`` (2,048-d pool5-sized inputs,
   a GRU over 50-d word vectors into 512-d), the sum of hinges with margin 0.05, bf16
   autocast, gradient clipping at 2, Adam; captions are the first 5,120 of Flickr8k's.
3. Without a gradient, as evaluation and search compute it: 1,000 images against 5,000
   captions (Flickr8k dev's size), 512-d float32, in PyTorch and in NumPy.

Both paths run in the same process on the same inputs, in blocks of steps, alternating
which goes first, after a warm-up; the median ms per step and the ratio come from that
run. The values of S are compared bit for bit and the gradients' largest difference is
recorded.

Run: python benchmarks/order_grad_speed.py   (nothing else should run on the CPU; the
JSON's load average says whether something did)
Writes benchmarks/order_grad_speed.json.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import record  # noqa: E402

import vsekit.lab.similarity as lab_sim  # noqa: E402
from vsekit import similarity as core  # noqa: E402
from vsekit.lab.data import load_flickr8k, tokenize  # noqa: E402
from vsekit.lab.losses import create_loss  # noqa: E402
from vsekit.lab.models.joint import JointConfig, JointEmbedding  # noqa: E402
from vsekit.lab.text.encoders import TextEncoderConfig  # noqa: E402
from vsekit.text.vocab import Vocabulary  # noqa: E402

OUT = Path(__file__).with_suffix(".json")
ROOT = Path(__file__).resolve().parents[1] / "../shared/data/flickr8k"
FUSED = lab_sim.order_similarity


def previous(img, txt, abs: bool = False):
    """The order similarity before 2026-11-27, the baseline: chunks of images whose
    ``[n, M, D]`` difference holds up to 2^24 elements; in training, autograd through it."""
    if abs:
        img, txt = img.__abs__(), txt.__abs__()
    step = max(1, (1 << 24) // max(1, txt.shape[0] * txt.shape[1]))
    parts = [-(((txt[None] - img[a : a + step][:, None]).clip(min=0)) ** 2).sum(-1)
             for a in range(0, img.shape[0], step)]  # fmt: skip
    if isinstance(img, np.ndarray):
        return np.concatenate(parts).reshape(img.shape[0], txt.shape[0])
    return torch.cat(parts).reshape(img.shape[0], txt.shape[0])


PATHS = {"fused": FUSED, "autograd": previous}


def alternate(step, rounds: int, block: int, paths=("fused", "autograd")) -> dict:
    """Median and min ms per step of ``step(path)`` for both paths, in blocks of
    ``block`` steps, alternating which path goes first."""
    times: dict[str, list[float]] = {p: [] for p in paths}
    for p in paths:  # warm-up
        for _ in range(2):
            step(p)
    for r in range(rounds):
        for p in list(paths) if r % 2 == 0 else list(paths)[::-1]:
            t0 = time.perf_counter()
            for _ in range(block):
                step(p)
            times[p].append((time.perf_counter() - t0) / block)
    med = {p: 1000 * float(np.median(v)) for p, v in times.items()}
    return {"ms_per_step_median": {p: round(v, 1) for p, v in med.items()},
            "ms_per_step_min": {p: round(1000 * min(v), 1) for p, v in times.items()},
            "speedup": round(med[paths[1]] / med[paths[0]], 2), "rounds": rounds,
            "steps_per_block": block}  # fmt: skip


def similarity_alone(rounds: int, block: int) -> dict:
    g = torch.Generator().manual_seed(0)
    img0, txt0 = torch.randn(128, 512, generator=g).bfloat16(), torch.randn(128, 512, generator=g)
    weights = torch.randn(128, 128, generator=g)

    def run(p: str) -> tuple[torch.Tensor, ...]:
        img, txt = img0.clone().requires_grad_(), txt0.clone().requires_grad_()
        s = PATHS[p](img, txt, abs=True)
        (s * weights).sum().backward()
        return s.detach(), img.grad, txt.grad

    (s, gi, gt), (s_ref, gi_ref, gt_ref) = run("fused"), run("autograd")
    check = {"values_bit_equal": bool(torch.equal(s, s_ref)),
             "max_abs_diff_grad_txt_f32": float((gt - gt_ref).abs().max()),
             "max_abs_grad_txt": float(gt_ref.abs().max()),
             "max_abs_diff_grad_img_bf16": float((gi.float() - gi_ref.float()).abs().max()),
             "max_abs_grad_img": float(gi_ref.float().abs().max())}  # fmt: skip
    return {
        "shape": "img [128, 512] bf16, txt [128, 512] f32, abs",
        **check,
        **alternate(run, rounds, block),
    }


def training_step(rounds: int, block: int) -> dict:
    captions = load_flickr8k(ROOT).texts[: 128 * 40]
    vocab = Vocabulary.build(tokenize(c) for c in captions)
    cfg = JointConfig(text=TextEncoderConfig(kind="gru", word_dim=50, embed_dim=512, glove=False),
                      similarity="order", abs=True)  # fmt: skip
    torch.manual_seed(0)
    feats = torch.randn(len(captions), 2048)
    loss_fn = create_loss("sum_hinge", margin=0.05, similarity="order", abs=True)
    models = {}
    for p in PATHS:
        torch.manual_seed(0)
        m = JointEmbedding(2048, vocab, cfg)
        models[p] = (m, torch.optim.Adam(m.parameters(), lr=1e-3, foreach=True))
    k = {p: 0 for p in PATHS}

    def run(p: str) -> None:
        m, opt = models[p]
        a = 128 * (k[p] % 40)
        k[p] += 1
        lab_sim.order_similarity = PATHS[p]  # the registry's closure reads this name
        try:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                img, txt = m.training_outputs(feats[a : a + 128], captions[a : a + 128])
                loss = loss_fn(img, txt)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 2.0)
            opt.step()
        finally:
            lab_sim.order_similarity = FUSED

    return {"model": "JointEmbedding 2048 -> 512, GRU 50 -> 512, sum hinge 0.05, bf16, Adam",
            **alternate(run, rounds, block)}  # fmt: skip


def without_gradient(rounds: int) -> dict:
    g = torch.Generator().manual_seed(4)
    img, txt = torch.randn(1000, 512, generator=g), torch.randn(5000, 512, generator=g)
    out = {"shape": "img [1000, 512], txt [5000, 512], float32, abs"}
    for lib, (i, t) in (("torch", (img, txt)), ("numpy", (img.numpy(), txt.numpy()))):
        paths = {"tiled": lambda i=i, t=t: core.order(i, t, abs_=True),
                 "previous": lambda i=i, t=t: previous(i, t, abs=True)}  # fmt: skip
        with torch.no_grad():
            a, b = paths["tiled"](), paths["previous"]()
            equal = torch.equal(a, b) if lib == "torch" else bool(np.array_equal(a, b))
            timed = alternate(lambda p, f=paths: f[p](), rounds, 1, ("tiled", "previous"))
            out[lib] = {"values_bit_equal": equal, **timed}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--block", type=int, default=10)
    a = ap.parse_args()
    torch.set_num_threads(1)
    results = {
        "command": "python benchmarks/order_grad_speed.py"
        + (f" --rounds {a.rounds}" if a.rounds != 6 else "")
        + (f" --block {a.block}" if a.block != 10 else ""),
        "git_commit": subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=OUT.parent, capture_output=True, text=True
        ).stdout.strip(),
        "threads": 1,
        "similarity": similarity_alone(a.rounds, a.block),
        "training_step": training_step(a.rounds, a.block),
        "without_gradient": without_gradient(a.rounds),
    }
    out = record(OUT, results)
    ng = out["without_gradient"]
    print(f"wrote {OUT}: similarity x{out['similarity']['speedup']}, "
          f"training step x{out['training_step']['speedup']}, without a gradient "
          f"x{ng['torch']['speedup']} (torch), x{ng['numpy']['speedup']} (numpy)")  # fmt: skip


if __name__ == "__main__":
    main()
