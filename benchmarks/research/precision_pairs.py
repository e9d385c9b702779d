"""fp32 against bf16 for the fair grid's cells: does a cell trained in fp32, on a CPU that
emulates bf16, land where the recorded bf16 cells of its row do?

The fair protocol fixes ``train.precision`` bf16 (``fair_protocol.py``), which an x86 CPU
without AVX512_BF16 emulates at 13 times fp32's cost (``benchmarks/bf16_train.json``), so
such a machine trains no cell of the grid. Before any amendment could let it train them in
fp32, this measures what that would change. For each cell in ``PAIRS`` (a recorded seed of
a row's chosen recipe, from rows whose seeds have all run), the same settings with
``train.precision=fp32``, trained on this machine and its own store build (a store built
on another CPU may differ in its float rounding: each pair records this store's digest,
the bf16 cell's where it has one, and whether they are the same), in
``RUNS/fp32-<cell>``, and scored as the runner scores a cell: the slice and dev at the
slice's best epoch (``scoring.score``). Each pair sets the fp32 run's dev rsum against the
bf16 cell's, and against the spread of the row's recorded seeds (the scale a difference
has to exceed to matter). Where the stores differ, a pair measures what a cell trained
here would change, precision, CPU and store build together, not precision alone.

Run (one process per core; each takes the next pair nobody holds, and a killed run resumes
from its last epoch):

    nohup nice -n 19 .venv/bin/python benchmarks/research/precision_pairs.py \\
        >> ~/.cache/vsekit/claims/precision-pairs.log 2>&1 &

Writes ``benchmarks/research/precision_pairs.json`` after each pair (atomically, under a
lock): the pairs, the machine with its CPU flags, the date and the command.
"""

from __future__ import annotations

import argparse
import datetime as dt
import fcntl
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/
from _common import machine, train_run  # noqa: E402

from research import fair_protocol as fair  # noqa: E402
from research import runner, scoring  # noqa: E402
from research.protocol import RUNS, STORE, load_cells  # noqa: E402
from vsekit.fsio import atomic_write  # noqa: E402

OUT = Path(__file__).with_suffix(".json")
#: recorded bf16 cells, shortest rows first, one seed of each row before a second
PAIRS = [
    "fair-fc7-sh-lr0.00316-nnone-d0.2-m1-s0",
    "fair-fne-sh-lr0.00316-nlayernorm-d0.5-m1-s0",
    "fair-fc7-ph-lr0.00316-nnone-d0.2-m1-s0",
    "fair-fne-ph-lr0.00316-nlayernorm-d0.5-m1-s0",
    "fair-fne-mh-lr0.001-nnone-d0.5-m1-s0",
    "fair-fnef-sh-lr0.00316-nlayernorm-d0.5-m1-s0",
    "fair-fc7-sh-lr0.00316-nnone-d0.2-m1-s1",
    "fair-fne-sh-lr0.00316-nlayernorm-d0.5-m1-s1",
    "fair-fc7-ph-lr0.00316-nnone-d0.2-m1-s1",
    "fair-fne-ph-lr0.00316-nlayernorm-d0.5-m1-s1",
]


def cell_of(rec: dict) -> fair.FairCell:
    """The fair cell a record names."""
    return fair.FairCell(rec["row"], fair.Recipe.from_dict(rec["recipe"]), rec["seed"])


def row_seeds(done: dict[str, dict], rec: dict) -> list[float]:
    """Dev rsum of each recorded seed of ``rec``'s row at its recipe."""
    return [r["dev"]["rsum"] for r in done.values()
            if r.get("row") == rec["row"] and r.get("recipe") == rec["recipe"]]  # fmt: skip


def run_pair(name: str, done: dict[str, dict]) -> dict:
    """Train ``name``'s settings in fp32 here (resuming a killed run) and score it."""
    import yaml

    rec = done[name]
    cell = cell_of(rec)
    assert cell.name == name, (cell.name, name)
    margin = yaml.safe_load((runner.ROOT / cell.config).read_text())["loss"]["margin"]
    settings = cell.settings(STORE, float(margin)) | {
        "train.precision": "fp32",
        "train.epochs": rec["config"]["train"]["epochs"],  # a cell run on has a higher cap
    }
    sets = [f"{k}={runner.yaml_value(v)}" for k, v in settings.items()]
    run = RUNS / f"fp32-{name}"
    commit = runner.git_commit()  # the code the training imports now (as the runner)
    t0 = time.perf_counter()
    held = runner.held(f"fp32-{name}")
    train_run(run, cell.config, sets, runner.ROOT, collapsed_ok=True, pass_fds=held)
    epochs, _, seconds = runner.run_log(run)
    best = json.loads((run / "best.json").read_text()) if (run / "best.json").is_file() else {}
    scores = scoring.score(cell, run)
    seeds = row_seeds(done, rec)
    digest = runner.store_digest()
    return {
        "cell": name,
        "row": rec["row"],
        "seed": rec["seed"],
        "bf16": {"slice": rec["slice"]["rsum"], "dev": rec["dev"]["rsum"],
                 "epochs_run": rec["epochs_run"], "best_epoch": rec["best_epoch"],
                 "cpu": rec["machine"].get("cpu"), "store_sha256": rec.get("store_sha256"),
                 "git_commit": rec.get("git_commit")},
        "fp32": {"slice": scores["slice"]["rsum"], "dev": scores["dev"]["rsum"],
                 "epochs_run": len(epochs), "best_epoch": best.get("epoch"),
                 "train_seconds": round(seconds, 1),
                 "epoch_seconds": runner.epoch_seconds(epochs),
                 "wall_seconds": round(time.perf_counter() - t0, 1),
                 "store_sha256": digest},
        "same_store": digest == rec.get("store_sha256"),
        "dev_difference": round(scores["dev"]["rsum"] - rec["dev"]["rsum"], 2),
        "row_seeds_dev": seeds,
        "row_seed_std": round(statistics.stdev(seeds), 2) if len(seeds) > 1 else None,
        "git_commit": commit,
        "date": dt.date.today().isoformat(),
    }  # fmt: skip


def summary(pairs: list[dict]) -> dict:
    """The differences (fp32 - bf16, dev rsum) against the rows' seed spreads, and how
    many pairs trained on the bf16 cell's own store."""
    diffs = [p["dev_difference"] for p in pairs]
    stds = [p["row_seed_std"] for p in pairs if p["row_seed_std"] is not None]
    out = {"pairs": len(pairs), "dev_difference_mean": round(statistics.mean(diffs), 2),
           "same_store": sum(p["same_store"] for p in pairs)}  # fmt: skip
    if len(diffs) > 1:
        out["dev_difference_std"] = round(statistics.stdev(diffs), 2)
    if stds:
        out["row_seed_std_mean"] = round(statistics.mean(stds), 2)
    out["within_2_seed_std"] = sum(
        abs(p["dev_difference"]) <= 2 * p["row_seed_std"] for p in pairs if p["row_seed_std"]
    )
    return out


def record(pair: dict) -> None:
    """Add ``pair`` to the JSON (replacing an earlier record of its cell), under a lock."""
    with open(RUNS / "precision-pairs.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        old = json.loads(OUT.read_text()) if OUT.is_file() else {}
        pairs = [p for p in old.get("pairs", []) if p["cell"] != pair["cell"]] + [pair]
        pairs.sort(key=lambda p: PAIRS.index(p["cell"]) if p["cell"] in PAIRS else len(PAIRS))
        out = {"date": dt.date.today().isoformat(), "machine": machine(),
               "command": "python benchmarks/research/precision_pairs.py",
               "summary": summary(pairs), "pairs": pairs}  # fmt: skip
        atomic_write(OUT, json.dumps(out, indent=2) + "\n")


def recorded() -> set[str]:
    """The cells whose pair the JSON holds."""
    return {p["cell"] for p in json.loads(OUT.read_text())["pairs"]} if OUT.is_file() else set()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max", type=int, default=0, help="stop after this many pairs (0: all)")
    args = ap.parse_args()
    runner.ensure_fair_store()
    done = load_cells(fair.CELLS)
    n = 0
    for name in PAIRS:
        if not runner.claim(f"fp32-{name}"):
            continue
        try:
            if name in recorded():  # (read once the pair is held: another process may have)
                continue
            pair = run_pair(name, done)
            record(pair)
            print(f"{name}: bf16 dev {pair['bf16']['dev']}, fp32 dev {pair['fp32']['dev']}",
                  flush=True)  # fmt: skip
        finally:
            runner.release(f"fp32-{name}")
        n += 1
        if args.max and n >= args.max:
            break


if __name__ == "__main__":
    main()
