"""Per-split statistics of a dataset (``vse data stats``)."""

from __future__ import annotations

import numpy as np

from vsekit.lab.data.dataset import Dataset
from vsekit.text.tokenizer import tokenize

QUANTILES = (0.0, 0.25, 0.5, 0.75, 0.95, 1.0)


def dataset_stats(ds: Dataset) -> dict:
    """``{"name", "splits": {split: {"images", "captions", "captions_per_image",
    "length_quantiles": {q: tokens}, "vocab_size"}}}``; lengths are in tokens."""
    split_of = [im.split for im in ds.images]
    per: dict[str, dict] = {s: {"lengths": [], "words": set()} for s in ds.splits}
    for c in ds.captions:
        toks = tokenize(c.text)
        acc = per[split_of[c.image]]
        acc["lengths"].append(len(toks))
        acc["words"].update(toks)
    sizes = ds.split_sizes()
    out = {}
    for s, acc in per.items():
        lengths = np.asarray(acc["lengths"] or [0])
        n_img, n_cap = sizes[s]["images"], sizes[s]["captions"]
        out[s] = {
            "images": n_img,
            "captions": n_cap,
            "captions_per_image": round(n_cap / n_img, 3) if n_img else 0.0,
            "length_quantiles": {
                f"q{int(q * 100)}": float(np.quantile(lengths, q)) for q in QUANTILES
            },
            "vocab_size": len(acc["words"]),
        }
    return {"name": ds.name, "splits": out}
