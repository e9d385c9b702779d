"""The ``vse`` command. Thin: parses arguments, calls the library, prints.

Each command group is a function that adds its sub-parser; a handler receives the parsed
``argparse.Namespace`` and returns an exit code. Library errors that describe bad input
(:class:`vsekit.data.DatasetError`, ``FileNotFoundError``, ``ValueError``) become a
one-line ``vse: error: ...`` message and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence

from . import __version__

CommandAdder = Callable[[argparse._SubParsersAction], None]
_COMMANDS: list[CommandAdder] = []


def command(fn: CommandAdder) -> CommandAdder:
    """Register a function that adds one sub-command (group) to ``vse``."""
    _COMMANDS.append(fn)
    return fn


# ---------------------------------------------------------------- vse data
@command
def _add_data(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("data", help="inspect datasets")
    dsub = p.add_subparsers(dest="data_cmd", required=True, metavar="COMMAND")
    s = dsub.add_parser("stats", help="images, captions, caption lengths and vocabulary per split")
    s.add_argument("path", help="dataset folder or file")
    s.add_argument("--format", choices=_source_names(), help="source format (default: detect)")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(handler=_data_stats)


def _source_names() -> list[str]:
    from .data import list_sources

    return list_sources()


def _data_stats(args: argparse.Namespace) -> int:
    from .data import dataset_stats, load_dataset

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


# ---------------------------------------------------------------- entry point
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vse", description="vsekit: visual-semantic embeddings for images and sentences."
    )
    parser.add_argument("--version", action="version", version=f"vsekit {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in _COMMANDS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from .data import DatasetError

    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except (DatasetError, FileNotFoundError, ValueError) as e:
        print(f"vse: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("vse: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
