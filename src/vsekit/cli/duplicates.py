"""``vse duplicates``: exact copies and near-duplicates in an index, in groups."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from vsekit.cli._base import DEFAULT_INDEX, command


@command
def _add_duplicates(sub: argparse._SubParsersAction) -> None:
    from vsekit.index.duplicates import NEAR_THRESHOLD

    p = sub.add_parser("duplicates", help="exact copies and near-duplicate photos, in groups")
    p.add_argument("--index", default=DEFAULT_INDEX, help="index directory")
    p.add_argument(
        "--threshold",
        type=float,
        default=NEAR_THRESHOLD,
        help="cosine over which two photos are near-duplicates",
    )
    p.add_argument("--kind", choices=("all", "exact", "near"), default="all")
    p.add_argument("--json", action="store_true", help="print the groups as JSON")
    p.set_defaults(handler=_duplicates)


def _duplicates(args: argparse.Namespace) -> int:
    from vsekit.index import Collection
    from vsekit.index.duplicates import find_duplicates
    from vsekit.index.scan import path_fields, shown

    coll = Collection(args.index)
    if coll.similarity != "cosine" and args.kind != "exact":
        raise ValueError(f"{coll.path}: near-duplicates need a cosine model's embeddings")
    groups = find_duplicates(coll.snapshot, args.threshold, args.kind)
    if args.json:
        out = []
        for g in groups:
            fields = [path_fields(p) for p in g.paths]
            out.append({**{k: v for k, v in asdict(g).items() if k != "pairs"},
                        "paths": [f["path"] for f in fields]})  # fmt: skip
            if any("path_b64" in f for f in fields):  # a name that is not UTF-8: its bytes
                out[-1]["paths_b64"] = [path_fields(p, always=True)["path_b64"] for p in g.paths]
        print(json.dumps(out, indent=2))
        return 0
    for g in groups:
        how = "same content" if g.kind == "exact" else f"similarity >= {g.similarity:.3f}"
        print(f"{g.kind} ({len(g.paths)} files, {how}):")
        for p in g.paths:
            print(f"  {shown(p)}")
    extra = sum(len(g.paths) - 1 for g in groups)
    n_exact = sum(g.kind == "exact" for g in groups)

    def n(k: int, word: str) -> str:
        return f"{k:,} {word}{'' if k == 1 else 's'}"

    print(f"{n(len(groups), 'group')} ({n_exact} exact, {len(groups) - n_exact} near) among "
          f"{n(len(coll), 'file')}; {n(extra, 'file')} beyond the first of each group")  # fmt: skip
    return 0
