"""``vse weights``: install and check backbone weights."""

from __future__ import annotations

import argparse

from vsekit.cli._base import command


@command
def _add_weights(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("weights", help="install and check pretrained backbone weights (offline)")
    wsub = p.add_subparsers(dest="weights_cmd", required=True, metavar="COMMAND")
    i = wsub.add_parser("install", help="fetch and convert a backbone's ImageNet weights")
    i.add_argument("name", help="backbone name, e.g. resnet50")
    i.add_argument("--force", action="store_true", help="convert again even if cached")
    i.set_defaults(handler=_weights_install)
    c = wsub.add_parser("check", help="classify two test photos; non-zero exit if wrong")
    c.add_argument("name")
    c.add_argument("--weights", default="auto", help="weights file (default: installed)")
    c.set_defaults(handler=_weights_check)


def _weights_install(args: argparse.Namespace) -> int:
    from vsekit.lab.features.weights import install_weights

    print(f"{args.name}: {install_weights(args.name, force=args.force)}")
    return 0


def _weights_check(args: argparse.Namespace) -> int:
    from vsekit.lab.features.backbones import create_backbone
    from vsekit.lab.features.check import check_backbone

    model = create_backbone(args.name, weights=args.weights)
    ok, res = check_backbone(model)
    for img, top in res.items():
        print(f"{img:>8}: " + ", ".join(f"{lab} {p:.3f}" for lab, p in top))
    print(f"{args.name} ({model.weights_source}): {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1
