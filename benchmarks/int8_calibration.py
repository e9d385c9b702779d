"""Choosing the int8 calibration of the default model's image graph without looking at dev.

For each calibration method, ``vse model onnx --storage int8`` quantises a copy of the
default bundle, calibrated on 200 Flickr8k train images (every 30th). Fidelity is then
measured on 300 *other* train images (offset by 15, never used for calibration): the
cosine between each image's int8 and fp32 (ONNX Runtime) embeddings, and whether the
fp32 nearest-neighbour ranking among these images survives (recall@1 of each image's
fp32 nearest neighbour). The method with the highest mean cosine is the one to evaluate
on dev, once, with ``benchmarks/default_model.py``.

Run: python benchmarks/int8_calibration.py [--methods minmax percentile entropy]
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
        bundle = OUT / f"default-int8-{method}"
        shutil.rmtree(bundle, ignore_errors=True)
        shutil.copytree(default_model_dir(), bundle)
        subprocess.run(
            [sys.executable, "-m", "vsekit", "model", "onnx", str(bundle), "--storage", "int8",
             "--calibrate", str(FLICKR8K), "--calibration-method", method],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        q = vsekit.load_model(bundle, backend="onnx").encode_image(held)
        cos = (q * ref).sum(1)
        sims = q @ q.T
        np.fill_diagonal(sims, -np.inf)
        nn = np.argmax(sims, axis=1)
        rows[method] = {
            "mean_cosine": round(float(cos.mean()), 5),
            "min_cosine": round(float(cos.min()), 5),
            "nn_kept": round(float((nn == nn_ref).mean()), 4),
        }
        print(method, rows[method], flush=True)
    best = max(rows, key=lambda m: rows[m]["mean_cosine"])
    record(
        Path(__file__).with_suffix(".json"),
        {
            "command": "python benchmarks/int8_calibration.py " + " ".join(sys.argv[1:]),
            "calibration": "200 train images (every 30th)",
            "held_out": "300 other train images (every 30th from 15)",
            "methods": rows,
            "chosen": best,
        },
    )
    print(json.dumps({"chosen": best}))


if __name__ == "__main__":
    main()
