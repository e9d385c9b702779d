"""``vse tags mine`` and ``vse tag``: ranked tags from captions, and tagging an image
with a trained bilinear ranker (registered into :mod:`vsekit.cli`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from vsekit.cli._base import command, positive_int


@command
def _add_tags(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tags", help="ranked tags mined from captions")
    tsub = p.add_subparsers(dest="tags_cmd", required=True, metavar="COMMAND")
    m = tsub.add_parser("mine", help="mine and cache each image's ranked tags")
    m.add_argument("--root", required=True, help="dataset folder or file")
    m.add_argument("--dataset", help="dataset format (default: detect)")
    m.add_argument("--scheme", default="nouns", choices=["nouns", "compound"])
    m.add_argument(
        "--relevance",
        default="alpha=0.75",
        help="loc | freq | alpha=A | syntactic[:alpha=A] (default alpha=0.75)",
    )
    m.add_argument("--out", help="file to write (default: in the vsekit cache)")
    m.add_argument("--show", type=positive_int, default=3, help="print this many images' tags")
    m.set_defaults(handler=_tags_mine)


def _tags_mine(args: argparse.Namespace) -> int:
    from vsekit.lab.data import load_dataset
    from vsekit.lab.features.weights import cache_dir
    from vsekit.lab.tags.mining import dataset_digest, mine_tags, parse_relevance, save_tags

    parse_relevance(args.relevance)  # fail fast on a bad spec
    ds = load_dataset(args.root, args.dataset)
    tags = mine_tags(ds, args.scheme, args.relevance, progress=True)
    digest = dataset_digest([im.id for im in ds.images], ds.texts, ds.caption_to_image)
    safe = args.relevance.replace("=", "").replace(":", "-")
    out = (
        Path(args.out)
        if args.out
        else cache_dir() / "tags" / f"{digest}-{args.scheme}-{safe}.json.gz"
    )
    meta = {"dataset": ds.name, "digest": digest, "scheme": args.scheme,
            "relevance": args.relevance}  # fmt: skip
    save_tags(out, tags, meta)
    n = [len(v) for v in tags.values()]
    vocab = {t for v in tags.values() for t, _ in v}
    print(f"{out}: {len(tags)} images, {len(vocab)} distinct tags, "
          f"{sum(n) / max(len(n), 1):.1f} tags per image")  # fmt: skip
    for image_id, ranked in list(tags.items())[: args.show]:
        print(f"  {image_id}: " + ", ".join(f"{t} ({s:.2f})" for t, s in ranked[:8]))
    return 0


@command
def _add_tag(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tag", help="rank tags for an image with a trained tag ranker")
    p.add_argument("image")
    p.add_argument("--model", required=True, help="training run of a tag ranker")
    p.add_argument("--vocab", help="file of candidate tags, one per line (default: training tags)")
    p.add_argument("--k", type=positive_int, default=10)
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_tag)


def _tag(args: argparse.Namespace) -> int:
    from vsekit.lab.features.featurizer import ImageFeaturizer
    from vsekit.lab.features.store import FeatureStore
    from vsekit.lab.tags.ranking import rank_vocabulary
    from vsekit.lab.train import load_run

    model, meta = load_run(args.model)
    if meta["config"].get("task") != "tags":
        raise ValueError(
            f"{args.model}: not a tag-ranking run (task: {meta['config'].get('task')})"
        )
    if args.vocab:
        lines = Path(args.vocab).read_text(encoding="utf-8").splitlines()
        words = [w.strip().lower() for w in lines if w.strip()]
    else:
        words = list(model.vocab.itos)
    data = meta["config"]["data"]
    feats = ImageFeaturizer(FeatureStore(Path(data["store"]).expanduser()))([args.image])
    ranked, unknown = rank_vocabulary(model, feats[data["features"]], words, args.k)
    if unknown:
        print(f"vse: note: no word vector for {len(unknown)} of the tags, e.g. {unknown[:5]}")
    if args.json:
        print(json.dumps([{"tag": t, "score": s} for t, s in ranked], indent=2))
    else:
        for t, s in ranked:
            print(f"{s:8.4f}  {t}")
    return 0
