"""What hubness reduction costs the shipped default on ONNX Runtime: embedding its
caption bank (once per model, then cached), the penalties of indexed photos (once per
photo, stored in the index) and a text search with and without the per-photo penalty
(alternating, same queries).

Run: python benchmarks/hubness_cost.py [--index ~/.cache/vsekit/index-flickr8k]
(the index of the 7,000 Flickr8k photos that benchmarks/startup.py uses)
Writes benchmarks/hubness_cost.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import record  # noqa: E402

import vsekit  # noqa: E402
from vsekit.index import Collection  # noqa: E402
from vsekit.index.query import text_query_bias  # noqa: E402
from vsekit.runtime.hubness import caption_bank_texts  # noqa: E402

QUERIES = ["a dog runs through the snow", "two children on a beach", "a man rides a bike",
           "a girl in a pink dress", "people climbing a rock", "a surfer on a wave"]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", default="~/.cache/vsekit/index-flickr8k")
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    model = vsekit.load_model()  # ONNX Runtime, the default
    hub = model.hubness
    assert hub is not None, "the default bundle ships no hubness reduction"
    texts = caption_bank_texts(model.captions, hub.config.caption_stride)
    t0 = time.perf_counter()
    model.encode_text(texts)  # what the first use does (the result is cached on disk)
    t_bank = time.perf_counter() - t0
    coll = Collection(Path(args.index).expanduser())
    emb = np.asarray(coll.emb)
    t0 = time.perf_counter()
    model.image_penalty(emb)
    t_pen = time.perf_counter() - t0
    bias = text_query_bias(coll, model)
    q = model.encode_text(QUERIES)
    with_pen, without = [], []
    for _ in range(args.rounds):
        for qv in q:
            for b, out in ((None, without), (bias, with_pen)):
                t0 = time.perf_counter()
                coll.search(qv[None], 20, "exact", None, b)
                out.append(time.perf_counter() - t0)
    ms = {k: round(1000 * statistics.median(v), 2) for k, v in
          (("with_penalty", with_pen), ("without_penalty", without))}  # fmt: skip
    res = {
        "command": "python benchmarks/hubness_cost.py " + " ".join(sys.argv[1:]),
        "cpu_shared": False,
        "caption_bank": {
            "captions": len(texts),
            "seconds": round(t_bank, 2),
            "captions_per_second": round(len(texts) / t_bank, 1),
        },  # fmt: skip
        "penalties": {
            "photos": len(emb),
            "seconds": round(t_pen, 3),
            "photos_per_second": round(len(emb) / t_pen, 1),
        },  # fmt: skip
        "search_exact_median_ms": ms,
        "hubness": {**vars(hub.config), "image_bank": len(hub.image_bank)},
    }
    record(Path(__file__).with_suffix(".json"), res)
    print(res)


if __name__ == "__main__":
    main()
