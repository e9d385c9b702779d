"""The ``@command`` registry of ``vse`` sub-command groups: each module of this package
adds its groups with it; :func:`vsekit.cli.build_parser` calls them in import order."""

from __future__ import annotations

import argparse
from collections.abc import Callable

CommandAdder = Callable[[argparse._SubParsersAction], None]
COMMANDS: list[CommandAdder] = []


def command(fn: CommandAdder) -> CommandAdder:
    """Register a function that adds one sub-command (group) to ``vse``."""
    COMMANDS.append(fn)
    return fn


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (batch sizes, k, counts, epochs)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {v}")
    return v


def positive_float(text: str) -> float:
    """argparse type: a number > 0 (minutes, rates)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
    return v


def port_number(text: str) -> int:
    """argparse type: a TCP port, 1-65535."""
    v = positive_int(text)
    if v > 65535:
        raise argparse.ArgumentTypeError(f"a port is at most 65535, got {v}")
    return v


# listed here, not read from the registry, so that building the parser imports nothing
# (an unknown format is still an error that lists the registered ones)
FORMAT_HELP = "dataset format: flickr8k | karpathy | precomp | coco | folder (default: detect)"
