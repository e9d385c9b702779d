"""Search latency with EXIF filters over the 7,000 Flickr8k photos, against the same
searches unfiltered, in one run.

The index holds the shipped model's real embeddings of the 7,000 photos (built once,
incrementally, under ``~/.cache/vsekit/bench/flickr8k-index``). Flickr8k photos carry no
EXIF, so a copy of the index gets **synthetic metadata** (seeded): capture dates spread
uniformly over 2015-2024, six camera models and none for a fifth of the photos, GPS
around five cities for 40%. Queries are 100 dev captions, embedded once beforehand;
each query is searched (k=20) with every filter in turn, the order rotating from query
to query, so that all variants share the machine's state. Reported: p50/p99 per filter
and method (exact; FAISS IVF), the share of photos each filter keeps, and the ratio of
each filtered p50 to the unfiltered one (goal: at most 1.5).

Run: python benchmarks/filter_latency.py [--queries 100]
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import record  # noqa: E402

import vsekit  # noqa: E402
from vsekit.fsio import cache_dir  # noqa: E402
from vsekit.index.filters import Filters  # noqa: E402
from vsekit.index.query import search_text_embedding  # noqa: E402
from vsekit.lab.data import load_dataset  # noqa: E402

FLICKR8K = Path(__file__).resolve().parents[2] / "shared" / "data" / "flickr8k"
CAMERAS = [("Google", "Pixel 7"), ("Apple", "iPhone 13"), ("Canon", "EOS R6"),
           ("Sony", "ILCE-7M3"), ("Fujifilm", "X-T4"), ("Google", "Pixel 4a")]  # fmt: skip
CITIES = [(48.8566, 2.3522), (40.7128, -74.006), (35.6762, 139.6503), (-33.8688, 151.2093),
          (41.3874, 2.1686)]  # fmt: skip
FILTERS = {
    "none": {},
    "after 2020": {"after": "2020"},
    "one month": {"after": "2019-06", "before": "2019-07"},
    "camera pixel": {"camera": "pixel"},
    "near Paris 20 km": {"near": "48.8566,2.3522,20"},
    "pixel after 2020 near Paris": {"camera": "pixel", "after": "2020",
                                    "near": "48.8566,2.3522,20"},
}  # fmt: skip


def build_index(index: Path) -> None:
    """``vse index`` of every Flickr8k photo (incremental: resumes where it stopped)."""
    subprocess.run([sys.executable, "-m", "vsekit", "index", str(FLICKR8K / "images"),
                    "--index", str(index), "--quiet"], check=True)  # fmt: skip


def synthetic_meta(index: Path, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    db = sqlite3.connect(index / "index.sqlite")
    ids = [i for (i,) in db.execute("SELECT id FROM files ORDER BY id")]
    start = np.datetime64("2015-01-01T00:00:00")
    span = int((np.datetime64("2025-01-01T00:00:00") - start) / np.timedelta64(1, "s"))
    rows = []
    for i in ids:
        taken = str(start + np.timedelta64(int(rng.integers(span)), "s"))
        cam = CAMERAS[rng.integers(len(CAMERAS))] if rng.random() > 0.2 else (None, None)
        lat = lon = None
        if rng.random() < 0.4:
            c = CITIES[rng.integers(len(CITIES))]
            lat, lon = c[0] + rng.normal(0, 0.1), c[1] + rng.normal(0, 0.1)
        rows.append((i, taken, "exif", cam[0], cam[1], lat, lon, None))
    with db:
        db.execute("DELETE FROM photo_meta")
        db.executemany("INSERT INTO photo_meta VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
    db.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--index", default=str(cache_dir() / "bench" / "flickr8k-index"))
    args = ap.parse_args()
    built = Path(args.index)
    build_index(built)
    work = Path(tempfile.mkdtemp()) / "index"
    shutil.copytree(built, work)
    synthetic_meta(work)
    ix = vsekit.open_index(work)
    coll, model = ix.collection, ix.model
    n = len(coll)
    dev = load_dataset(FLICKR8K).split("dev")
    texts = dev.texts[:: max(1, len(dev.texts) // args.queries)][: args.queries]
    queries = model.encode_text(texts)
    filters = {name: Filters.parse(**kw) for name, kw in FILTERS.items()}
    keeps = {name: round(float(f.files(coll.snapshot).mean()), 4) if f else 1.0
             for name, f in filters.items()}  # fmt: skip
    from vsekit.index.search import FaissSearcher

    coll._faiss = (coll.snapshot.key, FaissSearcher(coll.snapshot.emb, coll.snapshot.live))
    out: dict = {}
    names = list(filters)
    for method in ("exact", "faiss"):
        times: dict[str, list[float]] = {name: [] for name in names}
        counts: dict[str, list[int]] = {name: [] for name in names}
        for rep in range(2):  # the first pass warms caches; the second is measured
            for j, q in enumerate(queries):
                order = names[j % len(names) :] + names[: j % len(names)]
                for name in order:
                    t0 = time.perf_counter()
                    hits = search_text_embedding(coll, model, q[None], 20, method,
                                                 filters[name] or None)  # fmt: skip
                    if rep:
                        times[name].append(time.perf_counter() - t0)
                        counts[name].append(len(hits))
        base = float(np.percentile(times["none"], 50))
        out[method] = {
            name: {
                "keeps": keeps[name],
                "p50_ms": round(float(np.percentile(t, 50)) * 1000, 2),
                "p99_ms": round(float(np.percentile(t, 99)) * 1000, 2),
                "ratio_p50_vs_unfiltered": round(float(np.percentile(t, 50)) / base, 2),
                "results_min": int(min(counts[name])),
            }
            for name, t in times.items()
        }
    shutil.rmtree(work.parent, ignore_errors=True)
    res = record(
        Path(__file__).with_suffix(".json"),
        {
            "command": "python benchmarks/filter_latency.py " + " ".join(sys.argv[1:]),
            "photos": n,
            "queries": len(queries),
            "k": 20,
            "metadata": "synthetic (seeded): dates 2015-2024, 6 cameras (none for 20%), "
            "GPS around 5 cities for 40%",
            "results": out,
        },
    )
    print({m: {k: v["ratio_p50_vs_unfiltered"] for k, v in r.items()}
           for m, r in res["results"].items()})  # fmt: skip


if __name__ == "__main__":
    main()
