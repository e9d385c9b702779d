"""The ``vse`` command. Thin: parses arguments, calls the library, prints.

One module per command group (``data``, ``weights``, ``features``, ``train``,
``search`` for model/index/search/annotate/serve, ``tags``); each adds its sub-parser
with ``@command``; a handler receives the parsed
``argparse.Namespace`` and returns an exit code. Library errors that describe bad input
(:class:`vsekit.data.DatasetError`, ``FileNotFoundError``, ``ValueError``) become a
one-line ``vse: error: ...`` message and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .. import __version__
from . import data, features, search, tags, train, weights  # noqa: F401  (register commands)
from ._base import COMMANDS


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vse", description="vsekit: visual-semantic embeddings for images and sentences."
    )
    parser.add_argument("--version", action="version", version=f"vsekit {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in COMMANDS:
        add(sub)
    return parser


def _one_line(e: BaseException) -> str:
    if isinstance(e, OSError) and e.filename is not None and e.strerror:
        return f"{e.filename}: {e.strerror}"
    return " ".join(str(e).split()) or type(e).__name__


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except (OSError, ValueError, RuntimeError) as e:  # DatasetError is a ValueError
        print(f"vse: error: {_one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("vse: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
