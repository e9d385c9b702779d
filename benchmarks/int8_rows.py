"""What int8 row storage (``vse index --storage int8``) costs in retrieval on real data.

The default model's embeddings of the 1,000 Flickr8k dev photos, stored as float32 and
as int8 rows (:func:`vsekit.index.rows.quantize_int8`, read back as the index reads
them), searched exactly by the 5,000 dev captions: text-to-image R@1/5/10, and each
photo's cosine to its float32 row. The embeddings come from ``benchmarks/big_index.py``'s
cache (computed there from the photos if missing). No hubness reduction: the rows alone.

Run: python benchmarks/int8_rows.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import record  # noqa: E402
from _dev import dev_split  # noqa: E402
from big_index import real_vectors  # noqa: E402

from vsekit.index.rows import Int8Rows, quantize_int8  # noqa: E402

HERE = Path(__file__).resolve().parent


def t2i_recalls(img: np.ndarray, txt: np.ndarray, c2i: np.ndarray) -> dict[str, float]:
    sims = txt @ img.T
    rank = (sims > sims[np.arange(len(txt)), c2i][:, None]).sum(1)  # photos above the truth
    return {f"t2i_r{k}": round(float((rank < k).mean() * 100), 2) for k in (1, 5, 10)}


def main() -> None:
    imgs, caps = real_vectors()
    _, _, c2i = dev_split()
    dev = imgs[-1000:]  # the cache holds the 6,000 train photos, then the 1,000 dev ones
    q = Int8Rows(quantize_int8(dev), dev.shape[1])[:]
    cos = (q * dev).sum(1) / np.linalg.norm(q, axis=1)
    c2i = np.asarray(c2i)
    out = {
        "f32": t2i_recalls(dev, caps, c2i),
        "int8": t2i_recalls(q, caps, c2i),
        "cosine_to_f32": {"mean": round(float(cos.mean()), 6), "min": round(float(cos.min()), 6)},
        "bytes_per_row": {"f32": dev.shape[1] * 4, "int8": dev.shape[1] + 4},
        "command": "python benchmarks/int8_rows.py",
    }
    record(HERE / "int8_rows.json", out)
    print(out)


if __name__ == "__main__":
    main()
