"""FC7 (one-layer) vs FNE under the six pipelines of the journal paper, on Flickr8k dev.

Each configs/flickr8k-{fc7,fne}-{sh,mh,soe,moe,ph,poe}.yaml is trained under the same
wall-clock budget on this machine (``--minutes``; the best dev-rsum epoch is kept), then
written beside the paper's Flickr8k *test* figures (its Table 2, VGG16, 200-400 epochs on
a GPU). Results already in the JSON are kept, so the script can be run in parts
(``--only fne-mh,fc7-mh``).

Run: python benchmarks/research/flickr8k_table.py --minutes 10
Writes benchmarks/research/flickr8k.json and flickr8k.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/
from _common import record  # noqa: E402

from research.papers import TABLE2  # noqa: E402
from vsekit.lab.train import load_config, train  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PIPELINES = ("sh", "mh", "soe", "moe", "ph", "poe")


def paper_rsum(row: tuple) -> float:
    return round(sum(row[:3]) + sum(row[4:7]), 1)


def markdown(results: dict, minutes: float) -> str:
    head = (
        "| model | ours (dev): R@1 / R@5 / R@10 / Med r, annotation | retrieval | rsum "
        "| epochs | paper (test): annotation | retrieval | rsum |\n"
        "|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for feat in ("fc7", "fne"):
        for p in PIPELINES:
            key = f"{feat}-{p}"
            pr = TABLE2[key]
            paper = (
                f"{pr[0]} / {pr[1]} / {pr[2]} / {pr[3]} | {pr[4]} / {pr[5]} / {pr[6]} / "
                f"{pr[7]} | {paper_rsum(pr)}"
            )
            r = results.get(key)
            if r is None:
                ours = "not run | | |"
            else:
                m = r["best_metrics"]
                flag = " (collapsed)" if r["collapsed"] else ""
                ours = (
                    f"{m['i2t_r1']:.1f} / {m['i2t_r5']:.1f} / {m['i2t_r10']:.1f} / "
                    f"{m['i2t_medr']:.0f} | {m['t2i_r1']:.1f} / {m['t2i_r5']:.1f} / "
                    f"{m['t2i_r10']:.1f} / {m['t2i_medr']:.0f} | {m['rsum']:.1f}{flag} | "
                    f"{r['epochs_run']}"
                )
            lines.append(f"| {key.upper()} | {ours} | {paper} |")
    setups = sorted({(r.get("store"), r.get("threads")) for r in results.values()}, key=str)
    home = str(Path.home())
    setup = "; ".join(
        f"store {str(st).replace(home, '~')}, {th or 'default'} torch threads" for st, th in setups
    )
    return "\n".join(lines) + (
        f"\n\nOurs: Flickr8k dev, best epoch within {minutes} minutes of training per row "
        f"({setup}). Paper: Flickr8k test, VGG16, 200-400 epochs.\n"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--only", help="comma-separated keys, e.g. fne-mh,fc7-mh")
    ap.add_argument("--runs", default=str(Path.home() / ".cache/vsekit/runs/flickr8k-table"))
    ap.add_argument("--store", help="override the configs' FeatureStore (e.g. a 2-crop one)")
    ap.add_argument("--threads", type=int, help="torch threads per run")
    args = ap.parse_args()
    out_json = Path(__file__).with_name("flickr8k.json")
    results = json.loads(out_json.read_text()).get("results", {}) if out_json.is_file() else {}
    keys = (
        args.only.split(",")
        if args.only
        else [f"{f}-{p}" for f in ("fc7", "fne") for p in PIPELINES]
    )
    for key in keys:
        if key in results and not args.only:
            continue
        cfg = load_config(ROOT / "configs" / f"flickr8k-{key}.yaml")
        cfg.data.root = str(ROOT.parent / "shared" / "data" / "flickr8k")
        cfg.train.max_minutes = args.minutes
        if args.store:
            cfg.data.store = args.store
        if args.threads:
            cfg.train.threads = args.threads
        run = Path(args.runs) / key
        if run.exists():
            shutil.rmtree(run)
        res = train(cfg, run, progress=False)
        # re-read before writing: two lanes (--only ...) may share the JSON
        results = json.loads(out_json.read_text())["results"] if out_json.is_file() else {}
        results[key] = {
            k: res[k] for k in ("best_epoch", "best_metrics", "collapsed", "epochs_run", "seconds")
        }
        results[key].update(store=cfg.data.store, threads=cfg.train.threads)
        record(
            out_json,
            {
                "benchmark": "Flickr8k dev, FC7 (one-layer) vs FNE, ResNet-50",
                "minutes_per_run": args.minutes,
                "results": results,
            },
        )
        print(key, round(res["best_metrics"].get("rsum", float("nan")), 1), flush=True)
    results = json.loads(out_json.read_text())["results"] if out_json.is_file() else results
    Path(__file__).with_name("flickr8k.md").write_text(markdown(results, args.minutes))


if __name__ == "__main__":
    main()
