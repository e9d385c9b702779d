"""The seeds' claims, re-tested: one command for the grids and their report.

    python benchmarks/research/claims.py                # docs/claims.md, claims.png, README
    python benchmarks/research/claims.py --run fair     # train the fair grid's missing cells
    python benchmarks/research/claims.py --list fair    # print them, in order
    python benchmarks/research/claims.py --run fair --only fair-inst  # only MOE's and POE's starts
    python benchmarks/research/portable.py pack DIR  # the ternary-FNE cells' inputs, to carry

Three parts, one module each: the protocols as data and rules (``protocol.py``, the first
protocol, cells in ``benchmarks/research/cells_first/``; ``families.py``, the claims beyond Table 2;
``fair_protocol.py``, issue 41's, cells in ``benchmarks/research/cells_fair/``), the
runner (``runner.py``: scheduling, locks, resume; ``scoring.py``), and the report
(``report.py``, with the prose of ``explanations.py``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/
from research import fair_protocol as fair  # noqa: E402
from research import protocol, report, runner  # noqa: E402

GRIDS = {"first": (protocol.pending, protocol.CELLS), "fair": (fair.pending, fair.CELLS)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", choices=GRIDS, help="train the grid's missing cells")
    ap.add_argument("--list", choices=GRIDS, help="print the grid's pending cells and stop")
    ap.add_argument("--max-cells", type=int, default=0, help="stop after this many (0: all)")
    ap.add_argument(
        "--only", default="", help="only cells whose name starts with this (comma-separated: any)"
    )
    ap.add_argument("--stop-after", type=float, default=0, metavar="MIN",
                    help="start no cell after this many minutes (0: no limit)")  # fmt: skip
    ap.add_argument("--add-lengths", action="store_true",
                    help="add recall by caption length to the recorded cells of the "
                    "regression report's rows that lack it (from their runs)")  # fmt: skip
    ap.add_argument("--add-order-stats", action="store_true",
                    help="add how near the order loss's flat state each recorded MOE/POE "
                    "run ends (from their runs)")  # fmt: skip
    ap.add_argument("--add-epoch-seconds", action="store_true",
                    help="add each epoch's training time to the recorded fair cells that "
                    "lack it (from their runs)")  # fmt: skip
    ap.add_argument("--add-curves", type=Path, metavar="MOE_START_JSON",
                    help="add each epoch's loss and slice rsum to the recorded fair cells "
                    "that lack it (from their runs, else from this moe_start.json)")  # fmt: skip
    args = ap.parse_args()
    if args.add_curves:
        runner.add_curves(protocol.load_cells(fair.CELLS), args.add_curves)
    if args.add_epoch_seconds:
        runner.add_epoch_seconds(protocol.load_cells(fair.CELLS))
    if args.add_lengths:
        runner.add_lengths(protocol.load_cells())
    if args.add_order_stats:
        runner.add_order_stats(protocol.load_cells())
    if args.list:
        pending, folder = GRIDS[args.list]
        names = "".join(f"{c.name}\n" for c in pending(protocol.load_cells(folder)))
        try:
            sys.stdout.write(names)
            sys.stdout.flush()
        except BrokenPipeError:  # `--list fair | head`: the reader has what it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return
    if args.run == "fair":
        runner.run_fair(args.max_cells, args.only, args.stop_after)
    elif args.run == "first":
        runner.run_first(args.max_cells, args.only)
    report.write(protocol.load_cells(), protocol.load_cells(fair.CELLS))


if __name__ == "__main__":
    main()
