"""Indexing throughput of `vse index` on this CPU, against the bare embedding loop.

On the first N images of a folder (default: 256 of ../shared/data/flickr8k/images,
linked into a temporary folder), with the shipped default model (ResNet-50, 2 crops):

* baseline: ``VSEModel.encode_image`` on the same files in batches of 16, nothing
  else (decode + CNN + projection);
* vsekit: ``Collection.update`` on a fresh index (scan, decode, embed, fsync'ed appends,
  SQLite commits, progress);
* re-index of the unchanged folder: seconds, and images that went through the model
  (must be 0).

The two are timed in ``--rounds`` alternating rounds (default 3) and the medians
compared, since one round of each varies by several per cent on a shared CPU.

Run: python benchmarks/index_speed.py [--images DIR] [--n 256] [--threads 2] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import record  # noqa: E402

from vsekit.index import Collection, model_info, scan_images  # noqa: E402
from vsekit.index.collection import UpdateReport  # noqa: E402
from vsekit.runtime import VSEModel  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT.parent / "shared" / "data" / "flickr8k" / "images"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=Path, default=IMAGES)
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    files = [Path(p) for p, _, _ in scan_images(args.images)][: args.n]
    model = VSEModel.load("default")
    model.encode_image(files[:2])  # warm-up: weights loaded, kernels chosen

    def time_bare() -> float:
        t = time.perf_counter()
        for a in range(0, len(files), args.batch_size):
            model.encode_image(files[a : a + args.batch_size])
        return time.perf_counter() - t

    def time_index() -> tuple[float, UpdateReport]:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "photos"
            folder.mkdir()
            for f in files:
                (folder / f.name).symlink_to(f)
            coll = Collection(Path(tmp) / "index", model_info(model, "default"))
            first = coll.update(folder, model.encode_image, args.batch_size, progress=False)
            again = coll.update(folder, model.encode_image, args.batch_size, progress=False)
        return first.seconds, again

    bares, indexes = [], []
    for _ in range(args.rounds):
        bares.append(time_bare())
        secs, again = time_index()
        indexes.append(secs)
    bare, index_s = statistics.median(bares), statistics.median(indexes)
    row = {
        "images": len(files),
        "rounds": args.rounds,
        "bare_embed_s_each": [round(x, 2) for x in bares],
        "index_s_each": [round(x, 2) for x in indexes],
        "bare_embed_s": round(bare, 2),
        "bare_images_per_s": round(len(files) / bare, 2),
        "index_s": round(index_s, 2),
        "index_images_per_s": round(len(files) / index_s, 2),
        "index_overhead_pct": round(100 * (index_s / bare - 1), 1),
        "reindex_unchanged_s": round(again.seconds, 3),
        "reindex_images_embedded": again.embedded,
        "reindex_speedup": round(index_s / max(again.seconds, 1e-6)),
    }
    print(row)
    setup = {"model": "default (resnet50, 2 crops)", "folder": str(args.images.name),
             "threads": args.threads, "batch_size": args.batch_size}  # fmt: skip
    record(Path(__file__).with_suffix(".json"), {"setup": setup, "result": row})


if __name__ == "__main__":
    main()
