"""``vse model``: what a model is (``info``); the lab adds ``export``, ``onnx``, ``pin``,
``expand-vocab`` and ``build`` when it is installed."""

from __future__ import annotations

import argparse
import json

from vsekit.cli._base import MODEL_COMMANDS, command, load_model


@command
def _add_model(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("model", help="inspect (and, with vsekit[train], build) models")
    msub = p.add_subparsers(dest="model_cmd", required=True, metavar="COMMAND")
    i = msub.add_parser("info", help="what a model is, how it was trained and its dev metrics")
    i.add_argument("model", nargs="?", default="default")
    i.add_argument("--json", action="store_true", help="everything the bundle records, as JSON")
    i.set_defaults(handler=_model_info)
    for add in MODEL_COMMANDS:
        add(msub)


def _model_info(args: argparse.Namespace) -> int:
    from vsekit.runtime.hubness import HUBNESS_INFO

    m = load_model(args.model)
    info = {k: v for k, v in m.info.items() if k != "config"}
    info["fingerprint"] = m.fingerprint
    info["captions"] = len(m.captions)
    info["path"] = str(m.path)
    hub = m.path / HUBNESS_INFO if m.path else None
    info["hubness"] = json.loads(hub.read_text()) if hub and hub.is_file() else None
    print(json.dumps(info, indent=2))
    return 0
