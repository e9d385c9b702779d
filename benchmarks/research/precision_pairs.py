"""fp32 against bf16 for the fair grid's cells: does a cell trained in fp32, on a CPU that
emulates bf16, land where the recorded bf16 cells of its row do?

The fair protocol fixes ``train.precision`` bf16 (``fair_protocol.py``), which an x86 CPU
without AVX512_BF16 emulates at 13 times fp32's cost (``benchmarks/bf16_train.json``), so
for a while such a machine trained no cell of the grid. Before any amendment could let it
train them in fp32, this measured what that would change. For each cell in ``PAIRS`` (a
recorded seed of a row's chosen recipe, from rows whose seeds have all run), the same
settings with ``train.precision=fp32``, trained on this machine and its own store build
(a store built on another CPU may differ in its float rounding: each pair records this
store's digest, the bf16 cell's where it has one, and whether they are the same), in
``RUNS/fp32-<cell>``, and scored as the runner scores a cell: the slice and dev at the
slice's best epoch (``scoring.score``). Each pair sets the fp32 run's dev rsum against the
bf16 cell's, and against the spread of the row's recorded seeds (the scale a difference
has to exceed to matter). Where the stores differ, a pair measures what a cell trained
here would change, precision, CPU and store build together, not precision alone.

``--precision bf16`` trains a recorded pair's cell once more, here, in bf16, as the fair
runner now trains cells on such a CPU (``vsekit.lab.train.bf16``: its GEMMs in fp32
kernels on the same bf16 values), in ``RUNS/bf16here-<cell>``, and adds it to the pair
(``bf16_here``). That splits the pair's difference in two: bf16 here against the bf16
cell is the machine (CPU, store build, code) at equal precision; fp32 against bf16 here
is the precision alone, on one machine and one store.

Run (one process per core; each takes the next pair nobody holds, and a killed run resumes
from its last epoch):

    nohup nice -n 19 .venv/bin/python benchmarks/research/precision_pairs.py \\
        [--precision bf16] >> ~/.cache/vsekit/claims/precision-pairs.log 2>&1 &

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


#: what ``--precision`` trains here, and the prefix of its run folders (and locks)
HERE = {"fp32": "fp32-", "bf16": "bf16here-"}


def train_here(name: str, done: dict[str, dict], precision: str) -> dict:
    """Train ``name``'s settings here in ``precision`` (resuming a killed run) and score
    it: its slice and dev rsum, epochs, times and store digest."""
    import yaml

    rec = done[name]
    cell = cell_of(rec)
    assert cell.name == name, (cell.name, name)
    margin = yaml.safe_load((runner.ROOT / cell.config).read_text())["loss"]["margin"]
    settings = cell.settings(STORE, float(margin)) | {
        "train.precision": precision,
        "train.epochs": rec["config"]["train"]["epochs"],  # a cell run on has a higher cap
    }
    sets = [f"{k}={runner.yaml_value(v)}" for k, v in settings.items()]
    run = RUNS / f"{HERE[precision]}{name}"
    commit = runner.git_commit()  # the code the training imports now (as the runner)
    t0 = time.perf_counter()
    held = runner.held(f"{HERE[precision]}{name}")
    train_run(run, cell.config, sets, runner.ROOT, collapsed_ok=True, pass_fds=held)
    epochs, _, seconds = runner.run_log(run)
    best = json.loads((run / "best.json").read_text()) if (run / "best.json").is_file() else {}
    scores = scoring.score(cell, run)
    return {"slice": scores["slice"]["rsum"], "dev": scores["dev"]["rsum"],
            "epochs_run": len(epochs), "best_epoch": best.get("epoch"),
            "train_seconds": round(seconds, 1), "epoch_seconds": runner.epoch_seconds(epochs),
            "wall_seconds": round(time.perf_counter() - t0, 1),
            "store_sha256": runner.store_digest(),
            "bf16_gemms": runner.bf16_gemms(settings, epochs),
            "git_commit": commit, "date": dt.date.today().isoformat()}  # fmt: skip


def run_pair(name: str, done: dict[str, dict]) -> dict:
    """Train ``name``'s settings in fp32 here and set them against its bf16 cell."""
    rec = done[name]
    fp32 = train_here(name, done, "fp32")
    commit, date = fp32.pop("git_commit"), fp32.pop("date")
    fp32.pop("bf16_gemms")
    seeds = row_seeds(done, rec)
    return {
        "cell": name,
        "row": rec["row"],
        "seed": rec["seed"],
        "bf16": {"slice": rec["slice"]["rsum"], "dev": rec["dev"]["rsum"],
                 "epochs_run": rec["epochs_run"], "best_epoch": rec["best_epoch"],
                 "cpu": rec["machine"].get("cpu"), "store_sha256": rec.get("store_sha256"),
                 "git_commit": rec.get("git_commit")},
        "fp32": fp32,
        "same_store": fp32["store_sha256"] == rec.get("store_sha256"),
        "dev_difference": round(fp32["dev"] - rec["dev"]["rsum"], 2),
        "row_seeds_dev": seeds,
        "row_seed_std": round(statistics.stdev(seeds), 2) if len(seeds) > 1 else None,
        "git_commit": commit,
        "date": date,
    }  # fmt: skip


#: what :func:`with_bf16_here` adds to a pair
BF16_HERE_KEYS = ("bf16_here", "machine_difference", "precision_difference")


def with_bf16_here(pair: dict, here: dict) -> dict:
    """``pair`` with its cell trained again here in bf16 (``here``, from
    :func:`train_here`): against the bf16 cell it measures the machine (CPU, store build,
    code, and where this CPU lacks AVX512_BF16 the fp32-kernel GEMMs of
    ``vsekit.lab.train.bf16``) at equal precision; against the fp32 run, the precision
    alone, on one machine and store."""
    return pair | {
        "bf16_here": here,
        "machine_difference": round(here["dev"] - pair["bf16"]["dev"], 2),
        "precision_difference": round(pair["fp32"]["dev"] - here["dev"], 2),
    }


def keep_bf16_here(old: dict | None, pair: dict) -> dict:
    """``pair``, a pair's fp32 run, with the bf16 run here of ``old`` (the pair as
    recorded, if it was), so that a pair run again keeps it."""
    return pair | {k: v for k, v in (old or {}).items() if k in BF16_HERE_KEYS}


def summary(pairs: list[dict]) -> dict:
    """The differences (fp32 - bf16, dev rsum) against the rows' seed spreads, how many
    pairs trained on the bf16 cell's own store, and, over the pairs trained here in bf16
    too, the machine's and the precision's parts (:func:`with_bf16_here`)."""
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
    here = [p for p in pairs if "bf16_here" in p]
    out["bf16_here_pairs"] = len(here)
    for key in ("machine_difference", "precision_difference"):
        values = [p[key] for p in here]
        if values:
            out[f"{key}_mean"] = round(statistics.mean(values), 2)
        if len(values) > 1:
            out[f"{key}_std"] = round(statistics.stdev(values), 2)
    return out


def record(name: str, update) -> None:  # noqa: ANN001
    """Replace ``name``'s pair in the JSON by ``update(its recorded pair or None)``,
    under a lock (the JSON is read after the lock is held)."""
    with open(RUNS / "precision-pairs.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        old = json.loads(OUT.read_text()) if OUT.is_file() else {}
        mine = [p for p in old.get("pairs", []) if p["cell"] == name]
        pair = update(mine[0] if mine else None)
        pairs = [p for p in old.get("pairs", []) if p["cell"] != name] + [pair]
        pairs.sort(key=lambda p: PAIRS.index(p["cell"]) if p["cell"] in PAIRS else len(PAIRS))
        out = {"date": dt.date.today().isoformat(), "machine": machine(),
               "command": "python benchmarks/research/precision_pairs.py [--precision bf16]",
               "summary": summary(pairs), "pairs": pairs}  # fmt: skip
        atomic_write(OUT, json.dumps(out, indent=2) + "\n")


def recorded(precision: str) -> set[str]:
    """The cells the JSON holds a run of in ``precision`` for (fp32: the pair itself)."""
    pairs = json.loads(OUT.read_text())["pairs"] if OUT.is_file() else []
    return {p["cell"] for p in pairs if precision == "fp32" or "bf16_here" in p}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max", type=int, default=0, help="stop after this many pairs (0: all)")
    ap.add_argument("--precision", choices=HERE, default="fp32",
                    help="fp32: the pairs; bf16: train the recorded pairs' cells again "
                    "here in bf16 (bf16_here)")  # fmt: skip
    args = ap.parse_args()
    runner.ensure_fair_store()
    done = load_cells(fair.CELLS)
    prefix, n = HERE[args.precision], 0
    for name in PAIRS:
        if args.precision == "bf16" and name not in recorded("fp32"):
            continue  # a pair first: its fp32 run
        if not runner.claim(f"{prefix}{name}"):
            continue
        try:
            if name in recorded(args.precision):  # (read once held: another may have)
                continue
            if args.precision == "fp32":
                pair = run_pair(name, done)
                record(name, lambda old, pair=pair: keep_bf16_here(old, pair))
            else:
                here = train_here(name, done, "bf16")
                record(name, lambda old, here=here: with_bf16_here(old, here))
            print(f"{name}: {args.precision} here recorded", flush=True)
        finally:
            runner.release(f"{prefix}{name}")
        n += 1
        if args.max and n >= args.max:
            break


if __name__ == "__main__":
    main()
