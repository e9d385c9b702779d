"""Choosing the int8 calibration of the default model's image graph without looking at dev.

For each variant, ``vse model onnx --storage int8`` quantises a copy of the default
bundle, calibrated on Flickr8k train images (200 by default, spread evenly). A variant
is ``METHOD[+stem|+head|+stem-head][+ma][@N]``: the calibration method (minmax,
percentile, entropy), the nodes left in float (``--keep-float``), moving-average MinMax
ranges (``--moving-average``) and the number of calibration images. Fidelity is then
measured on 300 *other* train images (offset by 15, never used for calibration): the
cosine between each image's int8 and fp32 (ONNX Runtime) embeddings, and whether the
fp32 nearest-neighbour ranking among these images survives (recall@1 of each image's
fp32 nearest neighbour). The method with the highest mean cosine is the one to evaluate
on dev, once, with ``benchmarks/default_model.py``.

Run: python benchmarks/int8_calibration.py [--methods minmax minmax+stem percentile@64]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import record  # noqa: E402

import vsekit  # noqa: E402
from vsekit.data import load_dataset  # noqa: E402
from vsekit.runtime.base import default_model_dir  # noqa: E402

FLICKR8K = Path(__file__).resolve().parents[2] / "shared" / "data" / "flickr8k"
OUT = Path("~/.cache/vsekit/models").expanduser()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--methods", nargs="+", default=["minmax", "percentile", "entropy"])
    args = ap.parse_args()
    train = load_dataset(FLICKR8K).split("train")
    held = [im.path for im in train.images[15::30][:300]]  # disjoint from calibration
    ref = vsekit.load_model("default", backend="onnx").encode_image(held)
    nn_ref = np.argsort(-(ref @ ref.T), axis=1)[:, 1]
    rows = {}
    for method in args.methods:
        spec, _, n = method.partition("@")
        parts = spec.split("+")
        keep = "-".join(p for p in parts[1:] if p in ("stem", "head")) or "none"
        bundle = OUT / f"default-int8-{method.replace('@', '-n').replace('+', '-')}"
        shutil.rmtree(bundle, ignore_errors=True)
        shutil.copytree(default_model_dir(), bundle)
        cmd = [sys.executable, "-m", "vsekit", "model", "onnx", str(bundle), "--storage", "int8",
               "--calibrate", str(FLICKR8K), "--calibration-method", parts[0],
               "--keep-float", keep, "--calibration-images", n or "200"]  # fmt: skip
        if "ma" in parts:
            cmd.append("--moving-average")
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        # held-out rows that this variant's calibration (the CLI's rule) did not use
        n_cal = int(n or 200)
        step = max(1, len(train.images) // n_cal)
        used = {str(im.path) for im in train.images[::step][:n_cal]}
        keep_rows = np.array([str(p) not in used for p in held])
        q = vsekit.load_model(bundle, backend="onnx").encode_image(held)
        cos = (q * ref).sum(1)[keep_rows]
        sims = q @ q.T
        np.fill_diagonal(sims, -np.inf)
        nn = np.argmax(sims, axis=1)
        rows[method] = {
            "mean_cosine": round(float(cos.mean()), 5),
            "min_cosine": round(float(cos.min()), 5),
            "nn_kept": round(float((nn == nn_ref)[keep_rows].mean()), 4),
            "held_out_images": int(keep_rows.sum()),
            "float_nodes": json.loads((bundle / "onnx.json").read_text()).get("float_nodes"),
        }
        print(method, rows[method], flush=True)
    best = max(rows, key=lambda m: rows[m]["mean_cosine"])
    record(
        Path(__file__).with_suffix(".json"),
        {
            "command": "python benchmarks/int8_calibration.py " + " ".join(sys.argv[1:]),
            "calibration": "N train images spread evenly (200 unless @N), every 30th for 200",
            "held_out": "300 other train images (every 30th from 15)",
            "methods": rows,
            "chosen": best,
        },
    )
    print(json.dumps({"chosen": best}))


if __name__ == "__main__":
    main()
