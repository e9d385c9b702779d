"""What the benchmarks of pixel-reading evidence sources (``colour_evidence.py``,
``object_counts.py``) share: a source's bonus over a query set, dev rsum with and without
it, and their command line."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from query_scoreboard import FLICKR8K, cached_photos, split_images


def bonus_matrix(src, texts: Sequence[str], ev: dict) -> np.ndarray:
    """``[len(texts), N]``: ``src``'s bonus for each text over the photos of ``ev`` (0
    where the source has nothing to say about a text)."""
    n = len(next(iter(ev.values())))
    out = np.zeros((len(texts), n), np.float32)
    for j, t in enumerate(texts):
        b = src.score(t, ev)
        if b is not None:
            out[j] = b
    return out


def dev_rsum(src, ev: dict, triggers: Callable[[str], bool], name: str) -> dict:
    """Dev rsum over the 5,000 dev captions, ranked as search ranks
    (``model.retrieval_scores``), without and with ``src``'s bonus (``ev``: its arrays
    for the dev photos). Search is text-to-image only, so image-to-text keeps the model's
    scores. ``captions_with_<name>``: how many captions ``triggers``."""
    import vsekit
    from vsekit.evidence import fuse
    from vsekit.lab.data import load_dataset
    from vsekit.lab.eval import retrieval_metrics

    model = vsekit.load_model("default")
    ds = load_dataset(FLICKR8K).split("dev")
    ids = split_images("dev")
    if [Path(im.path).name for im in ds.images] != ids:
        raise SystemExit("dev image order differs from the scoreboard's")
    caps = list(ds.texts)
    sim = model.retrieval_scores(cached_photos(model, ids, model.encode_image),
                                 model.encode_text(caps))  # [images, captions]  # fmt: skip
    fused = fuse(sim.T, caps, [src], {src.name: ev}).T
    m0 = retrieval_metrics(sim, ds.caption_to_image)
    m1 = {k: v for k, v in retrieval_metrics(fused, ds.caption_to_image).items()
          if k.startswith("t2i")}  # fmt: skip
    m1 |= {k: v for k, v in m0.items() if k.startswith("i2t")}
    m1["rsum"] = sum(m1[f"{d}_r{k}"] for d in ("t2i", "i2t") for k in (1, 5, 10))
    return {"captions": len(caps), f"captions_with_{name}": sum(map(bool, map(triggers, caps))),
            "without": {k: round(float(v), 2) for k, v in m0.items()},
            "with": {k: round(float(v), 2) for k, v in m1.items()}}  # fmt: skip


def main(script: str, doc: str, actions: dict[str, Callable[[], dict]]) -> None:
    """The command line of an evidence benchmark: one ``--<action>`` flag per entry of
    ``actions`` (``sweep`` -> ``--sweep``), each result kept under its key in the JSON
    beside ``script`` with the command that made it; earlier results of other actions
    are kept."""
    from _common import record

    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    for key in actions:
        ap.add_argument("--" + key.replace("_", "-"), action="store_true")
    args = ap.parse_args()
    path = Path(script).with_suffix(".json")
    old = json.loads(path.read_text()) if path.is_file() else {}
    out = {k: old[k] for k in (*actions, "commands") if k in old}
    command = " ".join([f"python benchmarks/{Path(script).name}", *sys.argv[1:]])
    for key, fn in actions.items():
        if getattr(args, key):
            out[key] = fn()
            out.setdefault("commands", {})[key] = command
    out["cpu_shared"] = True  # other jobs ran on the same 2 cores (see load_average)
    record(path, out)
