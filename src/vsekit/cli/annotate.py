"""``vse annotate``: the best captions and tags for a photo or a video."""

from __future__ import annotations

import argparse
import json

from vsekit.cli._base import command, load_model, positive_int


@command
def _add_annotate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("annotate", help="the best captions (and tags) for an image or a video")
    p.add_argument("image", help="a photo, or a video file (by its whole clip)")
    p.add_argument("--model", default="default")
    p.add_argument("--k", type=positive_int, default=5)
    p.add_argument(
        "--tags",
        type=positive_int,
        default=10,
        help="at most this many tags, if the model has a tagger (a calibrated one shows "
        "only the tags it is sure of, possibly none)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_annotate)


def _annotate(args: argparse.Namespace) -> int:
    from vsekit.media.images import open_regular
    from vsekit.media.video import is_video
    from vsekit.runtime.annotator import annotate_arrays

    open_regular(args.image).close()  # a FIFO or a device is refused before any read
    model = load_model(args.model)
    if not model.captions:
        raise ValueError(f"model {args.model!r} has no caption pool (export it --captions-from)")
    if is_video(args.image):  # the whole clip: mean of its frames' embeddings and features
        v = model.encode_video(args.image, with_features=True)
        emb, feats = v.clip[None], v.features[None]
    else:
        emb, feats = model.embed_with_features([args.image])
    a = annotate_arrays(model, emb, feats, args.k, args.tags)[0]
    if args.json:
        print(json.dumps(a.as_dict(), indent=2))
        return 0
    for c, s in a.captions:
        print(f"{s:7.4f}  {c}")
    if a.tags:
        print("tags: " + ", ".join(t for t, _ in a.tags))
    if a.demoted or a.dropped_tags:
        gone = [*(v.text for v in a.demoted), *(f"tag {v.text}" for v in a.dropped_tags)]
        nouns = sorted({n.noun for v in (*a.demoted, *a.dropped_tags) for n in v.vetoed})
        print(f"left out: {len(gone)} ({', '.join(nouns)}: the photo's ImageNet classes "
              f"rule them out; --json lists them)")  # fmt: skip
    return 0
