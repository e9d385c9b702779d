"""`vse index --ray` against the single-process path: photos per second, as ratios.

N Flickr8k photos are indexed from scratch into a fresh index, alternating, R rounds:
the single-process path (ONNX Runtime on all cores), Ray with 1 worker (one replica
taking every core) and Ray with 2 workers (one core each), on a local Ray cluster
started once (actor start and model load are inside each timed run, as in a real job),
and the one writer alone: the same update fed embeddings computed beforehand, so that
its scan, EXIF reads and commits are all that is timed. Its rate bounds how many workers
one writer can keep up with.
The default model, int8 image graph. Run alone on the CPU.

Run: python benchmarks/ray_index.py [--photos 200] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import record  # noqa: E402
from _dev import F8K  # noqa: E402

import vsekit  # noqa: E402
from vsekit.index import Collection, model_info  # noqa: E402
from vsekit.index.ray_index import cluster, ray_batches  # noqa: E402
from vsekit.index.update import Batch  # noqa: E402

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--photos", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    work = Path(tempfile.mkdtemp(prefix="ray-bench-"))
    photos = work / "photos"
    photos.mkdir()
    for p in sorted((F8K / "images").glob("*.jpg"))[: args.photos]:
        shutil.copy(p, photos / p.name)
    model = vsekit.load_model()
    info = model_info(model, "default")
    cluster(None)  # a local cluster, started once, outside the timings
    modes = {
        "single process": None,
        "ray, 1 worker": ray_batches(
            "default", info["dim"], model.decode_size, True, 16, None, 1, cores
        ),  # fmt: skip
        "ray, 2 workers": ray_batches(
            "default", info["dim"], model.decode_size, True, 16, None, 2, max(1, cores // 2)
        ),  # fmt: skip
    }
    # the one writer alone: batches whose embeddings were computed beforehand, so the
    # timing is the scan, EXIF headers and commits; its rate bounds how many workers help
    pre = Collection(work / "pre", info)
    pre.update(photos, model.encode_image, 16, progress=False, reduce_to=model.decode_size)
    snap = pre.snapshot
    vec = {p: snap.embedding_of(i) for i, p in zip(snap.ids, snap.paths, strict=True)}

    def precomputed(todo):
        for a in range(0, len(todo), 16):
            part = todo[a : a + 16]
            yield Batch(part, np.stack([vec[p] for p, _, _ in part]), [], [None] * len(part),
                        0, len(part))  # fmt: skip

    modes["the writer alone (embeddings precomputed)"] = precomputed
    times: dict[str, list[float]] = {m: [] for m in modes}
    try:
        for r in range(args.rounds):
            for name, batches in modes.items():
                idx = work / f"idx-{r}-{name.replace(' ', '').replace(',', '-')}"
                coll = Collection(idx, info)
                t = time.perf_counter()
                rep = coll.update(photos, model.encode_image, 16, progress=False,
                                  reduce_to=model.decode_size, batches=batches)  # fmt: skip
                times[name].append(time.perf_counter() - t)
                assert rep.added == args.photos, rep.summary()
                print(name, f"{times[name][-1]:.1f} s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    best = {m: min(t) for m, t in times.items()}
    rate = {m: args.photos / s for m, s in best.items()}
    base = rate["single process"]
    rows = {m: {"seconds": round(best[m], 2), "photos_per_s": round(rate[m], 2),
                "vs_single_process": round(rate[m] / base, 3),
                "all_seconds": [round(x, 2) for x in times[m]]} for m in modes}  # fmt: skip
    out = record(
        HERE / "ray_index.json",
        {
            "command": "python benchmarks/ray_index.py " + " ".join(sys.argv[1:]),
            "photos": args.photos,
            "rounds": args.rounds,
            "cores": cores,
            "modes": rows,
            "note": "best of the rounds; each run from a fresh index, actors started and the "
            "model loaded inside the timing",
        },
    )
    for m, r in out["modes"].items():
        print(f"{m}: {r['photos_per_s']} photos/s ({r['vs_single_process']}x)")


if __name__ == "__main__":
    main()
