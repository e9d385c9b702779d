"""``vse model``: what a model is (``info``); the lab adds ``export``, ``onnx``, ``pin``,
``expand-vocab`` and ``build`` when it is installed."""

from __future__ import annotations

import argparse
import json

from vsekit.cli._base import (
    MISSING_MODEL_COMMANDS,
    MISSING_MODULES,
    MODEL_COMMANDS,
    add_stub,
    command,
    load_model,
)


@command
def _add_model(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("model", help="inspect (and, with vsekit[train], build) models")
    msub = p.add_subparsers(dest="model_cmd", required=True, metavar="COMMAND")
    i = msub.add_parser("info", help="what a model is, how it was trained and its dev metrics")
    i.add_argument("model", nargs="?", default="default")
    i.add_argument("--json", action="store_true", help="everything the bundle records, as JSON")
    i.set_defaults(handler=_model_info)
    for add in MODEL_COMMANDS:
        if add.__module__ not in MISSING_MODULES:
            add(msub)
    for name, why in MISSING_MODEL_COMMANDS.items():
        if name not in msub.choices:
            add_stub(msub, name, why)


def _model_info(args: argparse.Namespace) -> int:
    from vsekit.runtime.hubness import HUBNESS_INFO

    m = load_model(args.model)
    info = {k: v for k, v in m.info.items() if k != "config"}
    info["fingerprint"] = m.fingerprint
    info["captions"] = len(m.captions)
    info["path"] = str(m.path)
    if m.precision_choice is not None:
        info["precision"] = m.precision_choice.as_dict()
    hub = m.path / HUBNESS_INFO if m.path else None
    info["hubness"] = json.loads(hub.read_text()) if hub and hub.is_file() else None
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(summary(info, m))
    return 0


def summary(info: dict, m) -> str:
    """A few lines a person reads: what the model is, its figures, where it lives."""
    image = info.get("image", {})
    members = info.get("source", {}).get("members") or []
    dev = info.get("dev_metrics") or {}
    hub = info.get("hubness") or {}
    lines = [
        f"{info.get('name') or m.path.name}  (fingerprint {info['fingerprint']}, "
        f"{m.backend} {getattr(m, 'precision', 'fp32')})",
        f"image:     {image.get('backbone')} {image.get('features')}, {image.get('crops')} crops; "
        f"embedding {m.embed_dim}-d, {m.similarity_name}",
        f"text:      {len(members) or 1} tower(s)"
        + (": " + ", ".join(x.get("name", "?") for x in members) if members else ""),
        f"captions:  {info['captions']:,} in the annotation pool; tagger: "
        + ("yes" if m.tagger is not None else "no"),
    ]
    if hub:
        cfg = hub.get("config", hub)
        lines.append(f"hubness:   CSLS, beta {cfg.get('beta')}, k {cfg.get('k_text')} / "
                     f"{cfg.get('k_image')}")  # fmt: skip
    choice = m.precision_choice
    if choice is not None:
        lines.append(f"precision: image {choice.image}, text {choice.text} on this CPU: "
                     f"{choice.reason}")  # fmt: skip
    if dev:
        lines.append(f"dev:       rsum {dev.get('rsum')} (R@1 {dev.get('i2t_r1')} / "
                     f"{dev.get('t2i_r1')}) recorded at export, before hubness")  # fmt: skip
    lines.append(f"path:      {info['path']}   (--json: everything the bundle records)")
    return "\n".join(lines)
