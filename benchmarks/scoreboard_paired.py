"""How far apart two scorers on the query scoreboard really are: paired differences over
the same queries, with a bootstrap interval.

The scoreboard (``benchmarks/query_scoreboard.py``) records each scorer's per-query P@5,
P@10 and nDCG@10. For a pair (a baseline and another scorer) on one split, this reads
those records (nothing is scored again) and gives, per metric:

- the mean difference (other - baseline) over the queries both were scored on;
- a 95% interval from a paired bootstrap over queries (:data:`RESAMPLES` resamples of the
  query set with replacement, seed 0; the 2.5th and 97.5th percentiles of the mean
  difference);
- how many queries the other scorer wins, loses and ties;
- the same mean difference per category (no interval: 7 to 25 queries a category).

An interval that straddles 0 says the scoreboard cannot tell the two apart at this size;
it does not change any rule that reads the scoreboard (those compare the means).
Both scorers must have been scored on the same judgments (their ``judgments_sha256``).

Run: python benchmarks/scoreboard_paired.py [--split dev] [--baseline default] [OTHER ...]
(no OTHER: every other scorer recorded on that split). Writes
benchmarks/scoreboard_paired.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SCOREBOARD = HERE / "query_scoreboard.json"
METRICS = ("p@5", "p@10", "ndcg@10")
RESAMPLES = 10_000


def paired(base: list[dict], other: list[dict], metric: str, seed: int = 0) -> dict:
    """The paired comparison of one metric over the queries of both runs (by id)."""
    a = {q["id"]: q for q in base}
    b = {q["id"]: q for q in other}
    ids = sorted(set(a) & set(b))
    if not ids:
        raise SystemExit("the two runs share no query")
    d = np.array([b[i][metric] - a[i][metric] for i in ids], np.float64)
    rng = np.random.default_rng(seed)
    boot = d[rng.integers(0, len(d), (RESAMPLES, len(d)))].mean(axis=1)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    by_cat: dict[str, list[float]] = defaultdict(list)
    for i, x in zip(ids, d, strict=True):
        by_cat[a[i]["category"]].append(float(x))
    return {
        "queries": len(ids),
        "mean_difference": round(float(d.mean()), 4),
        "interval_95": [round(float(lo), 4), round(float(hi), 4)],
        "wins": int((d > 0).sum()),
        "losses": int((d < 0).sum()),
        "ties": int((d == 0).sum()),
        "by_category": {c: round(float(np.mean(v)), 4) for c, v in sorted(by_cat.items())},
    }


class StaleJudgments(ValueError):
    """Two scorers were scored on different judgments of a split."""


def compare(runs: dict, split: str, baseline: str, other: str) -> dict:
    for name in (baseline, other):
        if split not in runs.get(name, {}):
            raise SystemExit(f"{name}: not scored on {split} in {SCOREBOARD.name}; known: "
                             f"{sorted(k for k in runs if split in runs[k])}")  # fmt: skip
    a, b = runs[baseline][split], runs[other][split]
    if a["judgments_sha256"] != b["judgments_sha256"]:
        raise StaleJudgments(f"{baseline} and {other} were scored on different {split} "
                             "judgments; score both again")  # fmt: skip
    return {m: paired(a["queries"], b["queries"], m) for m in METRICS}


def main() -> None:
    sys.path.insert(0, str(HERE))
    from _common import record

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("others", nargs="*")
    ap.add_argument("--split", choices=("dev", "slice"), default="dev")
    ap.add_argument("--baseline", default="default")
    args = ap.parse_args()
    runs = json.loads(SCOREBOARD.read_text())["scorers"]
    others = args.others or [k for k in runs if k != args.baseline and args.split in runs[k]]
    out_path = Path(__file__).with_suffix(".json")
    pairs = {}  # only what this run compared: a pair is never kept past its scorers' figures
    skipped = {}
    for other in others:
        key = f"{args.split}: {other} vs {args.baseline}"
        try:
            pairs[key] = compare(runs, args.split, args.baseline, other)
        except StaleJudgments as e:
            if args.others:  # asked for by name: say so and stop
                raise SystemExit(str(e)) from None
            skipped[key] = str(e)
            print(f"skipped: {e}")
            continue
        r = pairs[key]["p@5"]
        print(f"{key}: P@5 {r['mean_difference']:+.4f} (95% {r['interval_95']}), "
              f"{r['wins']} wins, {r['losses']} losses, {r['ties']} ties")  # fmt: skip
    command = " ".join(["python benchmarks/scoreboard_paired.py", *sys.argv[1:]])
    record(out_path, {"resamples": RESAMPLES, "pairs": pairs, "skipped": skipped,
                      "command": command, "cpu_shared": "not timed"})  # fmt: skip


if __name__ == "__main__":
    main()
