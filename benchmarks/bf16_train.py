"""bf16 autocast for training on a CPU: speed (any CPU) and accuracy (AVX-512 BF16).

Protocol (issue: retrieval quality, "use bf16 where it costs no accuracy, and measure
that it doesn't"):

1. Speed: the GRU member's recipe (``configs/flickr8k-recommended.yaml``, batch 128, the
   max-of-hinges loss), one model per variant, the same real batches; training steps
   (forward, loss, backward, Adam) timed in blocks of 5, the variants in rotating order,
   6 rounds after a warm-up; median ms per step, and the ratios, from the same run. The
   variants (``VARIANTS``): fp32; bf16 autocast in PyTorch's bf16 kernels; bf16 autocast
   with its GEMMs in fp32 kernels (``vsekit.lab.train.bf16``, entries from 2026-11-29 on).
2. Accuracy: the ``benchmarks/ensembles.py`` GRU member ``gru-s0`` trained again with
   ``train.precision: bf16`` (``gru-bf16-s0``), epochs chosen on the same carved slice;
   both scored on the 1,000 dev images (2-crop store rows) and 5,000 captions.

Speed depends on the CPU: with AVX512_BF16 the products run in hardware; without it
PyTorch emulates bf16, and ``vse train`` runs the fp32-kernel variant instead.
``--speed`` times the steps alone, on this CPU, and adds them to the JSON's
``step_speed_by_cpu`` (one entry per CPU model, flag set and set of variants), leaving
the rest as recorded.

Run: python benchmarks/bf16_train.py [--train | --speed]   (nothing else on the CPU)
Writes benchmarks/bf16_train.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import record, train_run  # noqa: E402
from ensembles import RUNS, metrics  # noqa: E402

from vsekit.lab.data import load_dataset  # noqa: E402
from vsekit.lab.features.store import FeatureStore  # noqa: E402
from vsekit.lab.train import load_config  # noqa: E402
from vsekit.lab.train.bf16 import gemm_context  # noqa: E402
from vsekit.lab.train.config import apply_overrides  # noqa: E402
from vsekit.lab.train.export import model_from_run  # noqa: E402
from vsekit.lab.train.features import image_features  # noqa: E402
from vsekit.lab.train.retrieval_data import load_train_data  # noqa: E402
from vsekit.lab.train.trainer import Trainer, make_optimizer  # noqa: E402
from vsekit.runtime.precision import cpu_info  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
F8K = ROOT.parent / "shared" / "data" / "flickr8k"
CONFIG = "configs/flickr8k-recommended.yaml"


#: fp32; bf16 autocast in PyTorch's bf16 kernels; bf16 autocast with its GEMMs in fp32
#: kernels (``vsekit.lab.train.bf16``, what ``vse train`` runs where bf16 is emulated)
VARIANTS = ("fp32", "bf16", "bf16-fp32-gemms")


def step_times(rounds: int = 6, block: int = 5) -> dict:
    cfg = apply_overrides(load_config(ROOT / CONFIG), ["data.val_from_train=500"])
    data = load_train_data(cfg, progress=False)
    trainer = Trainer(cfg, data, ROOT / "runs" / "unused", progress=False)
    rng = np.random.default_rng(0)
    batches = data.epoch_batches(cfg.train.captions, cfg.train.batch_size, rng)
    loss_fn = trainer._loss("max")
    models = {}
    for p in VARIANTS:
        torch.manual_seed(0)
        m = data.new_model(cfg.model)
        models[p] = (m, make_optimizer(m, cfg.train))
    times: dict[str, list[float]] = {p: [] for p in VARIANTS}
    k = 0

    def run(p: str, n: int) -> float:
        nonlocal k
        m, opt = models[p]
        m.train()
        t0 = time.perf_counter()
        for _ in range(n):
            b = batches[k % len(batches)]
            k += 1
            with gemm_context("fp32" if p == "bf16-fp32-gemms" else "native"):
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=p != "fp32"):
                    loss = data.batch_loss(m, loss_fn, b)
                opt.zero_grad(set_to_none=True)
                loss.backward()
            opt.step()
        return (time.perf_counter() - t0) / n

    for p in times:  # warm-up
        run(p, 3)
    for r in range(rounds):
        for p in VARIANTS[r % len(VARIANTS) :] + VARIANTS[: r % len(VARIANTS)]:  # rotating
            times[p].append(run(p, block))
    med = {p: 1000 * float(np.median(v)) for p, v in times.items()}
    return {"ms_per_step_median": {p: round(v, 1) for p, v in med.items()},
            "ms_per_step_min": {p: round(1000 * min(v), 1) for p, v in times.items()},
            "speedup": round(med["fp32"] / med["bf16"], 2),
            "speedup_fp32_gemms": round(med["fp32"] / med["bf16-fp32-gemms"], 2),
            "rounds": rounds, "steps_per_block": block, "batch_size": cfg.train.batch_size,
            "threads": torch.get_num_threads()}  # fmt: skip


def train_bf16() -> None:
    sets = ["data.val_from_train=500", "train.seed=0", "train.precision=bf16"]
    train_run(RUNS / "gru-bf16-s0", CONFIG, sets, ROOT)


def add_speed(path: Path, speed: dict[str, object]) -> dict[str, object]:
    """``path``'s record with this CPU's step times in ``step_speed_by_cpu``, replacing
    an entry of the same CPU model, flags and variants (the top-level ``step_speed`` is the
    ``--train`` run's, on an AMD EPYC whose docstring named AVX-512 BF16, recorded before
    the flags were)."""
    from _common import machine

    from vsekit.fsio import atomic_write

    out = json.loads(path.read_text())
    entry = {"date": dt.date.today().isoformat(), "machine": machine(),
             "bf16": "emulated" if cpu_info().emulated_bf16 else "native",
             "command": "python benchmarks/bf16_train.py --speed", **speed}  # fmt: skip

    def key(e: dict) -> tuple:  # (entries before 2026-11-29 timed two variants, not three)
        return e["machine"]["cpu"], tuple(e["machine"]["cpu_flags"]), tuple(e["ms_per_step_median"])

    kept = [e for e in out.get("step_speed_by_cpu", []) if key(e) != key(entry)]
    out["step_speed_by_cpu"] = [*kept, entry]
    atomic_write(path, json.dumps(out, indent=2) + "\n")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--train", action="store_true", help="train the bf16 member if missing")
    mode.add_argument("--speed", action="store_true", help="time the steps on this CPU only")
    args = ap.parse_args()
    if args.train and cpu_info().emulated_bf16:
        # the record's speed-up and accuracy are of a CPU with bf16 arithmetic: keep them
        raise SystemExit("bf16_train.py --train: this CPU emulates bf16 (no AVX512_BF16); "
                         "run --speed here, --train on a CPU with AVX512_BF16")  # fmt: skip
    speed = step_times()
    print(speed, flush=True)
    if args.speed:
        add_speed(Path(__file__).with_suffix(".json"), speed)
        return
    if args.train:
        train_bf16()
    ds = load_dataset(F8K)
    dev = ds.split("dev")
    store = FeatureStore(Path("~/.cache/vsekit/stores/flickr8k-resnet50-c2").expanduser())
    acc = {}
    for name in ("gru-s0", "gru-bf16-s0"):
        model = model_from_run(RUNS / name)
        ids = [im.id for im in dev.images]
        img = model.encode_image_features(image_features(store, "baseline", ids))
        txt = model.encode_text(dev.texts)
        acc[name] = {"dev": metrics(img, txt, [c.image for c in dev.captions]),
                     "best_epoch": json.loads((RUNS / name / "best.json").read_text())["epoch"],
                     "precision": "bf16" if "bf16" in name else "fp32"}  # fmt: skip
        print(name, acc[name]["dev"]["rsum"], flush=True)
    path = Path(__file__).with_suffix(".json")
    other_cpus = json.loads(path.read_text()).get("step_speed_by_cpu", []) if path.is_file() else []
    record(path, {"command": "python benchmarks/bf16_train.py --train", "config": CONFIG,
                  "step_speed": speed, "accuracy": acc,
                  "step_speed_by_cpu": other_cpus})  # fmt: skip


if __name__ == "__main__":
    main()
