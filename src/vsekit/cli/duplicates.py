"""``vse duplicates``: exact copies and near-duplicates in an index, in groups; with
``--move-to``, keep one file of each group and move the others out (a dry run unless
``--apply``), and ``--undo`` to move them back."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from vsekit.cli._base import DEFAULT_INDEX, command


@command
def _add_duplicates(sub: argparse._SubParsersAction) -> None:
    from vsekit.index.duplicates import CROP_DISTANCE, HASH_DISTANCE, NEAR_THRESHOLD

    p = sub.add_parser(
        "duplicates",
        help="exact copies and near-duplicate photos, in groups; keep one, move the rest out",
        description="Groups of duplicates: same content (exact), perceptual hashes a few "
        "bits apart, or embeddings close together (near). With --move-to DIR, one file "
        "of each group is kept and the others are moved into DIR under their paths "
        "relative to the indexed folder: a dry run unless --apply; nothing is deleted, "
        "and an undo list is written into DIR (replay it with --undo FILE). "
        "--keep best: most pixels, then largest file, then oldest; largest: largest "
        "file first; oldest: oldest (EXIF date, else file time) first.",
    )
    p.add_argument("--index", default=DEFAULT_INDEX, help="index directory")
    p.add_argument(
        "--threshold",
        type=float,
        default=NEAR_THRESHOLD,
        help="cosine over which two photos are near-duplicates by their embeddings",
    )
    p.add_argument(
        "--hash-distance",
        type=int,
        default=HASH_DISTANCE,
        help="perceptual-hash bits (of 64) within which two photos are copies; it also "
        f"caps the {CROP_DISTANCE} bits allowed between a photo and a crop of another (-1: "
        "embeddings only)",
    )
    p.add_argument("--kind", choices=("all", "exact", "near"), default="all")
    p.add_argument("--json", action="store_true", help="print the groups (or the plan) as JSON")
    p.add_argument(
        "--keep",
        choices=("best", "largest", "oldest"),
        default=None,
        help="which file of each group stays (with --move-to; default best)",
    )
    p.add_argument("--move-to", metavar="DIR", help="move the files not kept into DIR")
    p.add_argument("--apply", action="store_true", help="really move them (without it: a dry run)")
    p.add_argument("--undo", metavar="FILE", help="move the files of an undo list back")
    p.set_defaults(handler=_duplicates)


def _n(k: int, word: str) -> str:
    return f"{k:,} {word}{'' if k == 1 else 's'}"


def _duplicates(args: argparse.Namespace) -> int:
    from vsekit.index.dedupe import undo

    if args.undo:
        if args.move_to or args.apply or args.keep:
            raise ValueError("--undo: give it alone (not with --move-to, --apply or --keep)")
        rep = undo(args.undo)
        from vsekit.index.scan import shown

        for orig, why in rep.skipped:
            print(f"not restored: {shown(orig)}: {why}")
        left = f"; {_n(len(rep.skipped), 'file')} not restored" if rep.skipped else ""
        print(f"{_n(rep.restored, 'file')} moved back (the next `vse index` indexes them){left}")
        return 0
    if (args.keep or args.apply) and not args.move_to:
        raise ValueError("--move-to: give the folder to move the files not kept into")
    from vsekit.index import Collection
    from vsekit.index.duplicates import find_duplicates

    coll = Collection(args.index)
    if coll.similarity != "cosine" and args.kind != "exact":
        raise ValueError(f"{coll.path}: near-duplicates need a cosine model's embeddings")
    groups = find_duplicates(coll.snapshot, args.threshold, args.kind, args.hash_distance)
    if args.move_to:
        return _move(args, coll, groups)
    if args.json:
        _print_json(groups)
        return 0
    from vsekit.index.scan import shown

    for g in groups:
        if g.kind == "exact":
            how = "same content"
        else:
            # the group's least alike pair (not a threshold: --threshold is the
            # embedding stage's), and how far the hash stage let its pairs be
            how = f"least alike pair at cosine {g.similarity:.3f}"
            if g.hash_distance is not None:
                how += f", hashes (whole or of a crop) at most {g.hash_distance} bits apart"
        print(f"{g.kind} ({len(g.paths)} files, {how}):")
        for p in g.paths:
            print(f"  {shown(p)}")
    extra = sum(len(g.paths) - 1 for g in groups)
    n_exact = sum(g.kind == "exact" for g in groups)
    print(
        f"{_n(len(groups), 'group')} ({n_exact} exact, {len(groups) - n_exact} near) among "
        f"{_n(len(coll), 'file')}; {_n(extra, 'file')} beyond the first of each group"
    )
    return 0


def _print_json(groups) -> None:
    from vsekit.index.scan import path_fields

    out = []
    for g in groups:
        fields = [path_fields(p) for p in g.paths]
        out.append({**{k: v for k, v in asdict(g).items() if k != "pairs"},
                    "paths": [f["path"] for f in fields]})  # fmt: skip
        if any("path_b64" in f for f in fields):  # a name that is not UTF-8: its bytes
            out[-1]["paths_b64"] = [path_fields(p, always=True)["path_b64"] for p in g.paths]
    print(json.dumps(out, indent=2))


def _move(args: argparse.Namespace, coll, groups) -> int:
    from vsekit.index.dedupe import apply_plan, plan_json, plan_moves
    from vsekit.index.scan import printable, shown

    plan = plan_moves(coll.snapshot, groups, args.keep or "best", args.move_to, coll.roots())
    if args.apply:
        apply_plan(plan, coll)
    if args.json:
        print(json.dumps(plan_json(plan, printable), indent=2))
        return 0
    verb = "moved" if args.apply else "would move"
    for g in plan.groups:
        kept = next(m for m in g.members if m.id == g.keep)
        print(f"{g.kind} ({len(g.members)} files): keep {shown(kept.path)}")
        for _, src, dst in g.moves:
            print(f"  {verb} {shown(src)} -> {shown(dst)}")
        for i, why in g.skipped:
            m = next(m for m in g.members if m.id == i)
            print(f"  left {shown(m.path)}: {why}")
    for p, why in plan.failed:
        print(f"not moved: {shown(p)}: {why}")
    if args.apply:
        print(f"{_n(plan.moved, 'file')} moved into {shown(plan.move_to)} and removed from "
              f"the index; undo list: {shown(plan.undo_file)} "
              f"(vse duplicates --undo {shown(plan.undo_file)})")  # fmt: skip
    else:
        print(f"dry run: {_n(plan.n_moves, 'file')} would be moved into "
              f"{shown(plan.move_to)} (keep={plan.keep}); add --apply to move them")  # fmt: skip
    return 0
