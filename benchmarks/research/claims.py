"""The seeds' claims, re-tested: one command for the grid and its report.

    python benchmarks/research/claims.py --run fair   # train the fair grid's missing cells
    python benchmarks/research/claims.py --list fair  # print them, in order

The protocols are ``protocol.py`` (the first, cells in ``benchmarks/claims/``) and
``fair_protocol.py`` (issue 41, cells in ``benchmarks/research/cells_fair/``); the runner
is ``runner.py``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import fair_protocol as fair  # noqa: E402
import runner  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", choices=["fair"], help="train the grid's missing cells")
    ap.add_argument("--list", choices=["fair"], help="print the grid's pending cells")
    ap.add_argument("--max-cells", type=int, default=0, help="stop after this many (0: all)")
    ap.add_argument("--only", default="", help="only cells whose name starts with this")
    args = ap.parse_args()
    if args.list:
        for c in fair.pending(runner.load_cells(runner.FAIR_CELLS)):
            print(c.name)
        return
    if args.run:
        runner.run_fair(args.max_cells, args.only)


if __name__ == "__main__":
    main()
