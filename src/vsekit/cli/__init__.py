"""The ``vse`` command. Thin: parses arguments, calls the library, prints.

One module per command group: the core's (``index``, ``search``, ``annotate``,
``serve``, ``model``, ``completion``) here, the research commands (``data``, ``weights``,
``features``, ``train``, ``eval``, ``tags``, ``tag`` and the building sub-commands of
``model``) in :mod:`vsekit.lab.cli`, found through entry points so that the core never
imports the lab. Each adds its sub-parser with ``@command``; a handler receives the
parsed ``argparse.Namespace`` and returns an exit code. Library errors that describe bad
input (:class:`vsekit.errors.DatasetError`, ``FileNotFoundError``, ``ValueError``) become
a one-line ``vse: error: ...`` message and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import re
import sqlite3
import sys
from collections.abc import Sequence

from vsekit import __version__
from vsekit.cli import (  # noqa: F401  (register commands)
    annotate,
    completion,
    doctor,
    duplicates,
    index,
    model,
    search,
    serve,
)
from vsekit.cli._base import COMMANDS, MISSING_MODULES, add_stub, load_plugins

EXAMPLES = {
    "index": "vse index ~/Pictures                   # re-run to update; --exclude '*/raw/*'",
    "search": 'vse search "two dogs in the snow" --k 5  # or --image photo.jpg; -f: paths only',
    "annotate": "vse annotate photo.jpg --k 3",
    "duplicates": "vse duplicates --threshold 0.95     # --kind exact: identical files only",
    "serve": "vse serve --port 8000                  # http://127.0.0.1:8000/",
    "model": "vse model info default",
    "doctor": "vse doctor                   # --json; --photos DIR: parity on your photos",
    "data": "vse data stats ../shared/data/flickr8k",
    "weights": "vse weights install resnet50 && vse weights check resnet50",
    "features": "vse features extract --root DATA --backbone resnet50 --crops 10 --out STORE",
    "train": "vse train configs/flickr8k-recommended.yaml --data-root ../shared/data/flickr8k",
    "eval": "vse eval runs/flickr8k-recommended --split dev",
    "tags": "vse tags mine --root ../shared/data/flickr8k --scheme nouns",
    "tag": "vse tag photo.jpg --model runs/flickr8k-tags",
    "completion": 'eval "$(vse completion bash)"',
}


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Each option's default after its help (unless None or off, or the option is a
    switch, whose default is its absence); the example keeps its line breaks."""

    def _get_help_string(self, action: argparse.Action) -> str:
        h = (action.help or "").strip()
        switch = isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction))
        shown = (action.default not in (None, False, [], argparse.SUPPRESS)
                 and action.option_strings and not switch)  # fmt: skip
        if shown and "%(default)" not in h and "default" not in h:
            h = f"{h} (default: %(default)s)".strip()
        return h


def _all_parsers(parser: argparse.ArgumentParser):
    yield parser
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for p in a.choices.values():
                yield from _all_parsers(p)


#: commands of the core whose runs need no lab command registered (their start stays
#: fast: the entry points are not read)
CORE_ONLY = ("index", "search", "annotate", "serve", "duplicates", "doctor")


def build_parser(plugins: bool = True) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vse",
        description="vsekit: visual-semantic embeddings for images and sentences.",
    )
    parser.add_argument("--version", action="version", version=f"vsekit {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    missing = load_plugins() if plugins else {"vsekit.commands": {}}
    for add in COMMANDS:
        if add.__module__ not in MISSING_MODULES:  # registered earlier, extra gone since
            add(sub)
    for name, why in missing["vsekit.commands"].items():
        if name not in sub.choices:
            add_stub(sub, name, why)
    _group_commands(parser, sub)
    for name, top in sub.choices.items():
        if name in EXAMPLES:
            top.epilog = f"example:\n  {EXAMPLES[name]}"
        for p in _all_parsers(top):
            p.formatter_class = _HelpFormatter
            for a in p._actions:  # so that options without help still show their default
                if a.help is None and a.option_strings and a.default not in (None, False):
                    a.help = "(default: %(default)s)"
    return parser


#: what ``vse --help`` lists first; the rest are the research commands (``[train]``)
EVERYDAY = ("index", "search", "annotate", "duplicates", "serve", "model", "doctor", "completion")


def _group_commands(parser: argparse.ArgumentParser, sub: argparse._SubParsersAction) -> None:
    """``vse --help``: the everyday commands, then the research commands under their own
    heading (they need the ``[train]`` extra), instead of one alphabetical list."""
    helps = {a.dest: a.help or "" for a in sub._choices_actions}
    sub._choices_actions.clear()  # listed in the epilog below instead
    sub.metavar = "COMMAND"
    sub.help = "one of the commands below (vse COMMAND --help for its options)"
    everyday = [n for n in EVERYDAY if n in helps]
    research = [n for n in helps if n not in EVERYDAY]
    width = max(map(len, helps)) + 2

    def block(names: list[str]) -> str:
        return "\n".join(f"  {n:<{width}}{helps[n]}" for n in names)

    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = (
        f"commands:\n{block(everyday)}\n\n"
        f"research commands (need the [train] extra: pip install 'vsekit[train]'):\n"
        f"{block(research)}\n\n"
        'start: vse index FOLDER, then vse search "what is in the photo"'
    )


def _unknown_command(argv: list[str]) -> str | None:
    """``vse serch``: the one-line error with the nearest command, or None."""
    import difflib

    first = next((a for a in argv if not a.startswith("-")), None)
    names = [*EVERYDAY, "data", "weights", "features", "train", "eval", "tags", "tag"]
    if first is None or first in names or any(a in ("-h", "--help", "--version") for a in argv):
        return None
    close = difflib.get_close_matches(first, names, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; one of: {', '.join(names)}"
    return f"vse: error: unknown command {first!r}{hint}"


def _one_line(e: BaseException) -> str:
    """An exception as one printable line (undecodable bytes as ``\\xNN``, control
    characters escaped)."""
    from vsekit.index.scan import shown

    if isinstance(e, OSError) and e.filename is not None and e.strerror:
        return shown(f"{e.filename}: {e.strerror}")
    return shown(" ".join(str(e).split())) or type(e).__name__


def _database_error(e: sqlite3.Error, args: argparse.Namespace) -> str:
    """A damaged (or locked) index database: what happened and the way on."""
    folder = getattr(args, "index", None)
    if not isinstance(e, sqlite3.DatabaseError) or isinstance(e, sqlite3.OperationalError):
        return f"index database: {_one_line(e)}"
    where = f" --index {folder}" if isinstance(folder, str) else ""
    return (
        f"index database{f' {folder}/index.sqlite' if where else ''}: {_one_line(e)}; "
        f"rebuild it with `vse index FOLDER{where} --rebuild` (your photos are untouched; "
        "only the index is made again)"
    )


#: options whose value may start with a minus (a southern latitude, a western
#: longitude): argparse would take ``--near -33.86,151.21`` for an unknown option
SIGNED_VALUES = ("--near",)


def _attach_signed_values(argv: list[str]) -> list[str]:
    """``--near -33.86,151.21,20`` -> ``--near=-33.86,151.21,20``."""
    out: list[str] = []
    it = iter(argv)
    for a in it:
        if a in SIGNED_VALUES:
            value = next(it, None)
            if value is not None and re.match(r"-?\.?\d", value):
                out.append(f"{a}={value}")
                continue
            out.append(a)
            if value is not None:
                out.append(value)
            continue
        out.append(a)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    argv = _attach_signed_values(list(sys.argv[1:] if argv is None else argv))
    first = next((a for a in argv if not a.startswith("-")), None)
    unknown = _unknown_command(argv)
    if unknown:
        print(unknown, file=sys.stderr)
        return 2
    args = build_parser(plugins=first not in CORE_ONLY).parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except BrokenPipeError:  # `vse search ... -f | head`: the reader has had enough
        _quiet_stdout()
        return 141
    except (OSError, ValueError, RuntimeError) as e:  # DatasetError is a ValueError
        print(f"vse: error: {_one_line(e)}", file=sys.stderr)
        return 2
    except sqlite3.Error as e:  # an index database busy for 30 s, or damaged after opening
        print(f"vse: error: {_database_error(e, args)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("vse: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        print("vse: error: out of memory (a smaller --batch-size, or --storage int8 for a "
              "large index, needs less)", file=sys.stderr)  # fmt: skip
        return 2
    except Exception as e:  # a bug: one line, not a traceback (VSEKIT_DEBUG=1 shows it)
        if os.environ.get("VSEKIT_DEBUG"):
            raise
        print(f"vse: internal error: {type(e).__name__}: {_one_line(e)} (a bug in vsekit; "
              "VSEKIT_DEBUG=1 shows the traceback)", file=sys.stderr)  # fmt: skip
        return 1


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's final flush of a closed
    pipe prints no second error."""
    import os

    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
