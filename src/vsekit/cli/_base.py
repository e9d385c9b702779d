"""The ``@command`` registry of ``vse`` sub-command groups, and ``@model_command`` for
the sub-commands of ``vse model``.

The core's modules register with them on import. The lab's command modules are found
through entry points (groups ``vsekit.commands`` and ``vsekit.model_commands``: the name
is the command, the value the module that registers it), so the core never imports the
lab: :func:`load_plugins` imports each one, and a command whose module needs an extra
that is not installed becomes a stub that says so in one line."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from vsekit.fsio import cache_dir

CommandAdder = Callable[[argparse._SubParsersAction], None]
COMMANDS: list[CommandAdder] = []
MODEL_COMMANDS: list[CommandAdder] = []
MISSING_MODEL_COMMANDS: dict[str, str] = {}  # vse model sub-commands whose extra is missing
MISSING_MODULES: set[str] = set()  # plugin modules not to call (their extra is missing)
# entry-point groups of the commands that live above the core (the lab)
PLUGIN_GROUPS = ("vsekit.commands", "vsekit.model_commands")


def command(fn: CommandAdder) -> CommandAdder:
    """Register a function that adds one sub-command (group) to ``vse``."""
    if fn not in COMMANDS:
        COMMANDS.append(fn)
    return fn


def model_command(fn: CommandAdder) -> CommandAdder:
    """Register a function that adds one sub-command to ``vse model``."""
    if fn not in MODEL_COMMANDS:
        MODEL_COMMANDS.append(fn)
    return fn


def load_plugins() -> dict[str, dict[str, str]]:
    """Import every command module registered as an entry point; returns, per group, the
    commands whose module failed to import, with the reason (``{"train": "No module
    named 'torch'"}``)."""
    from importlib import import_module
    from importlib.metadata import entry_points
    from importlib.util import find_spec

    # the research commands import PyTorch only when they run: without it, they are
    # stubs from the start rather than tracebacks later
    no_torch = find_spec("torch") is None
    missing: dict[str, dict[str, str]] = {g: {} for g in PLUGIN_GROUPS}
    MISSING_MODULES.clear()
    for group in PLUGIN_GROUPS:
        for ep in entry_points(group=group):
            if no_torch:
                missing[group][ep.name] = "No module named 'torch'"
                MISSING_MODULES.add(ep.value)
                continue
            try:
                import_module(ep.value)
            except Exception as e:  # an extra that is missing or broken: say so, go on
                missing[group][ep.name] = f"{type(e).__name__}: {e}"
                MISSING_MODULES.add(ep.value)
    MISSING_MODEL_COMMANDS.clear()
    MISSING_MODEL_COMMANDS.update(missing["vsekit.model_commands"])
    return missing


def add_stub(sub: argparse._SubParsersAction, name: str, why: str) -> None:
    """A command whose module could not be imported: listed, and one line when run."""

    def handler(args: argparse.Namespace) -> int:
        raise RuntimeError(
            f"'{name}' is a research command: it needs PyTorch, pip install 'vsekit[train]' ({why})"
        )

    p = sub.add_parser(name, help="(needs vsekit[train])", add_help=False)
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(handler=handler)


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


# the default index: $VSEKIT_CACHE/index (~/.cache/vsekit/index), like every cache
DEFAULT_INDEX = str(cache_dir() / "index")


def set_threads(n: int) -> None:
    """CPU threads for whichever backend runs: ``$VSEKIT_THREADS``, which ONNX Runtime's
    sessions and the torch backend read when a model loads."""
    import os

    os.environ["VSEKIT_THREADS"] = str(n)
    os.environ["OMP_NUM_THREADS"] = str(n)


def load_model(name: str):
    from vsekit.runtime import load_model as _load

    return _load(name)


def clock(seconds: float | None) -> str:
    """``75.5`` -> ``1:15.5`` (a video time as people read it)."""
    m, s = divmod(float(seconds or 0.0), 60)
    return f"{int(m)}:{s:04.1f}"
