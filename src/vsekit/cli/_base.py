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


def source_names() -> list[str]:
    """Dataset formats, for ``--format`` choices."""
    from ..data import list_sources

    return list_sources()
