"""Near-duplicate threshold: precision and recall on pairs made from Flickr8k photos.

``--photos`` dev photos (the first ones by name) each get four copies: re-encoded as
JPEG quality 70, resized to half its sides (then JPEG 90), and centre-cropped to 90% and
to 75% of its sides. Every photo and copy is embedded with the shipped model, as
``vse index`` embeds. Positive pairs: a photo and one of its copies; negative pairs:
two different photos, and a photo and another photo's copy. For each cosine threshold:
precision and recall over all those pairs, recall per kind of copy, and the false
positives per 10,000 negative pairs. The default threshold
(``vsekit.index.duplicates.NEAR_THRESHOLD``) is the lowest with no false positive among
the negative pairs: in a library, negative pairs outnumber copies by far, so a false
pair in 10,000 would already be thousands of false groups.

Run: python benchmarks/duplicates.py [--photos 300]
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import record  # noqa: E402

import vsekit  # noqa: E402
from vsekit.index.duplicates import NEAR_THRESHOLD  # noqa: E402
from vsekit.lab.data import load_dataset  # noqa: E402

FLICKR8K = Path(__file__).resolve().parents[2] / "shared" / "data" / "flickr8k"


def jpeg(im: Image.Image, quality: int) -> Image.Image:
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=quality)
    buf.seek(0)
    return Image.open(buf).convert("RGB")


def crop(im: Image.Image, keep: float) -> Image.Image:
    w, h = im.size
    cw, ch = round(w * keep), round(h * keep)
    left, top = (w - cw) // 2, (h - ch) // 2
    return jpeg(im.crop((left, top, left + cw, top + ch)), 90)


COPIES = {
    "jpeg q70": lambda im: jpeg(im, 70),
    "half size": lambda im: jpeg(im.resize((im.width // 2, im.height // 2), Image.LANCZOS), 90),
    "crop 90%": lambda im: crop(im, 0.9),
    "crop 75%": lambda im: crop(im, 0.75),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--photos", type=int, default=300)
    args = ap.parse_args()
    model = vsekit.load_model()
    dev = load_dataset(FLICKR8K).split("dev")
    paths = sorted(im.path for im in dev.images)[: args.photos]
    originals = [Image.open(p).convert("RGB") for p in paths]
    orig = model.encode_image(originals, batch_size=16)
    copies = {k: model.encode_image([f(im) for im in originals], batch_size=16)
              for k, f in COPIES.items()}  # fmt: skip
    n = len(paths)
    pos = {k: np.einsum("ij,ij->i", orig, c) for k, c in copies.items()}
    sims = orig @ orig.T
    neg = [sims[np.triu_indices(n, 1)]]
    rng = np.random.default_rng(0)
    for c in copies.values():  # a photo against another photo's copy
        j = (np.arange(n) + rng.integers(1, n, n)) % n
        neg.append(np.einsum("ij,ij->i", orig, c[j]))
    neg = np.concatenate(neg)
    all_pos = np.concatenate(list(pos.values()))
    rows = []
    for t in np.round(np.arange(0.50, 1.0, 0.01), 2):
        tp, fp = int((all_pos >= t).sum()), int((neg >= t).sum())
        rows.append({
            "threshold": float(t),
            "precision": round(tp / (tp + fp), 4) if tp + fp else 1.0,
            "recall": round(tp / len(all_pos), 4),
            "recall_by_copy": {k: round(float((v >= t).mean()), 4) for k, v in pos.items()},
            "false_positives_per_10k_negatives": round(fp / len(neg) * 1e4, 2),
        })  # fmt: skip
    chosen = next((r for r in rows if r["false_positives_per_10k_negatives"] == 0), rows[-1])
    at_99 = next((r for r in rows if r["precision"] >= 0.99), rows[-1])
    at_default = next(r for r in rows if abs(r["threshold"] - NEAR_THRESHOLD) < 1e-9)
    out = record(
        Path(__file__).with_suffix(".json"),
        {
            "command": "python benchmarks/duplicates.py " + " ".join(sys.argv[1:]),
            "photos": n,
            "positive_pairs": len(all_pos),
            "negative_pairs": len(neg),
            "model": model.info.get("name", "default"),
            "cosine_quantiles": {
                "positives": {
                    k: [round(float(np.quantile(v, q)), 3) for q in (0.01, 0.5)]
                    for k, v in pos.items()
                },
                "negatives_p99_p999_max": [
                    round(float(np.quantile(neg, q)), 3) for q in (0.99, 0.999, 1.0)
                ],
            },  # fmt: skip
            "lowest_threshold_without_false_pairs": chosen,
            "lowest_threshold_with_precision_0.99": at_99,
            "at_default_threshold": at_default,
            "curve": rows,
        },
    )
    print({k: out[k] for k in ("lowest_threshold_without_false_pairs", "at_default_threshold")})


if __name__ == "__main__":
    main()
