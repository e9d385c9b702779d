"""The recommended configuration, trained from scratch and timed on this machine.

Trains configs/flickr8k-recommended.yaml into runs/bench-recommended (deleted first),
with the FeatureStore already extracted (extraction is not part of the budget; see
feature_stores.json), and records the wall-clock training time (dev evaluation after
each epoch included), the epochs run, the best dev epoch and its metrics, and the dev
rsum of every epoch, beside the paper's FNE-MH Flickr8k figures (test split).

With ``--tag NAME --set KEY=VALUE ...`` it trains a variant of the configuration and
records it under that name beside the others (e.g. ``--tag fne --set data.features=fne``).

Run: python benchmarks/recommended.py [--config configs/flickr8k-recommended.yaml]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import record  # noqa: E402
from research.papers import TABLE2_RECALLS  # noqa: E402

from vsekit.lab.train import load_config, train  # noqa: E402
from vsekit.lab.train.config import apply_overrides  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
_MH = TABLE2_RECALLS["fne-mh"]  # the journal paper's FNE-MH row
PAPER_FNE_MH = {"i2t": _MH[:3], "t2i": _MH[3:], "rsum": round(sum(_MH), 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default=str(ROOT / "configs" / "flickr8k-recommended.yaml"))
    ap.add_argument("--tag", default="recommended", help="name of this run in the JSON")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    cfg = apply_overrides(load_config(args.config), args.set)
    run = ROOT / "runs" / f"bench-{args.tag}"
    shutil.rmtree(run, ignore_errors=True)
    t0 = time.perf_counter()
    res = train(cfg, run, progress=False)
    wall = time.perf_counter() - t0
    rows = [json.loads(r) for r in (run / "metrics.jsonl").read_text().splitlines()]
    out_json = Path(__file__).with_suffix(".json")
    runs = json.loads(out_json.read_text()).get("runs", {}) if out_json.is_file() else {}
    runs[args.tag] = {
        "config": str(Path(args.config).resolve().relative_to(ROOT)),
        "overrides": args.set,
        "train_seconds": res["seconds"],
        "wall_seconds_with_loading": round(wall, 1),
        "epochs_run": res["epochs_run"],
        "best_epoch": res["best_epoch"],
        "best_metrics": res["best_metrics"],
        "rsum_per_epoch": [round(r["rsum"], 1) for r in rows],
    }
    record(out_json, {"paper_fne_mh": PAPER_FNE_MH, "runs": runs})
    print(json.dumps({args.tag: {k: runs[args.tag][k] for k in ("train_seconds", "best_metrics")}}))


if __name__ == "__main__":
    main()
