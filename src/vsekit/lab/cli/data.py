"""``vse data``: inspect datasets."""

from __future__ import annotations

import argparse
import json

from vsekit.cli._base import FORMAT_HELP, command


@command
def _add_data(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("data", help="inspect datasets")
    dsub = p.add_subparsers(dest="data_cmd", required=True, metavar="COMMAND")
    s = dsub.add_parser("stats", help="images, captions, caption lengths and vocabulary per split")
    s.add_argument("path", help="dataset folder or file")
    s.add_argument("--format", help=FORMAT_HELP)
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(handler=_data_stats)


def _data_stats(args: argparse.Namespace) -> int:
    from vsekit.lab.data import dataset_stats, load_dataset

    stats = dataset_stats(load_dataset(args.path, args.format))
    if args.json:
        print(json.dumps(stats, indent=2))
        return 0
    print(f"dataset: {stats['name']}")
    cols = f"{'split':<12}{'images':>8}{'captions':>10}{'cap/img':>9}{'vocab':>8}"
    print(f"{cols}  length q0/25/50/75/95/100")
    for split, s in stats["splits"].items():
        q = "/".join(f"{v:g}" for v in s["length_quantiles"].values())
        print(
            f"{split:<12}{s['images']:>8}{s['captions']:>10}{s['captions_per_image']:>9g}"
            f"{s['vocab_size']:>8}  {q}"
        )
    return 0
