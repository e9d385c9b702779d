"""Search latency of a collection: exact (chunked matrix product) vs FAISS IVF-Flat.

Synthetic collections of 10k, 100k and 1M unit vectors of the default model's size
(512-d), clustered around 2,000 random centres, with noise of 0.8 times a centre's
norm (real embeddings have structure; IVF recall on uniform noise would say nothing).
Queries are drawn the same way. Each query is searched alone (k=10), as a user's
would be; p50/p99 over the queries. FAISS recall@10 is measured against the exact
top 10 of the same queries; the FAISS build time is reported apart.

Run: python benchmarks/search_latency.py [--sizes 10000,100000,1000000] [--queries 200]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import record  # noqa: E402

from vsekit.index.search import FaissSearcher, exact_search  # noqa: E402

DIM = 512
NOISE = 0.8 / np.sqrt(DIM)  # noise norm 0.8 x a centre's norm (~1)


def clustered(n: int, centers: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    out = np.empty((n, centers.shape[1]), np.float32)
    for a in range(0, n, 100_000):  # in blocks: 1M x 512 float64 would be 4 GB
        m = min(100_000, n - a)
        x = centers[rng.integers(0, len(centers), m)] + NOISE * rng.normal(size=(m, DIM))
        out[a : a + m] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def timed(fn, queries) -> tuple[list[float], list]:
    times, results = [], []
    for q in queries:
        t = time.perf_counter()
        results.append(fn(q[None, :]))
        times.append(time.perf_counter() - t)
    return times, results


def pct(times: list[float], p: float) -> float:
    return round(float(np.percentile(times, p)) * 1000, 2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--nprobe", type=int, default=32)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(2000, DIM)) / np.sqrt(DIM)
    rows = []
    for n in [int(s) for s in args.sizes.split(",")]:
        emb = clustered(n, centers, rng)
        q = clustered(args.queries, centers, rng)
        t_exact, exact = timed(lambda x, emb=emb: exact_search(emb, x, 10), q)
        t = time.perf_counter()
        fs = FaissSearcher(emb, nprobe=args.nprobe)
        build = time.perf_counter() - t
        t_faiss, approx = timed(lambda x, fs=fs: fs.search(x, 10), q)
        recall = np.mean(
            [len(set(a[1][0]) & set(e[1][0])) / 10 for a, e in zip(approx, exact, strict=True)]
        )
        row = {
            "n": n,
            "exact_p50_ms": pct(t_exact, 50),
            "exact_p99_ms": pct(t_exact, 99),
            "faiss_p50_ms": pct(t_faiss, 50),
            "faiss_p99_ms": pct(t_faiss, 99),
            "faiss_speedup_p50": round(pct(t_exact, 50) / max(pct(t_faiss, 50), 1e-3), 1),
            "faiss_recall_at_10": round(float(recall), 4),
            "faiss_index": type(fs.index).__name__,
            "faiss_build_s": round(build, 1),
        }
        rows.append(row)
        print(row, flush=True)
        del emb, fs
    data = "unit vectors around 2,000 Gaussian centres, noise norm 0.8 x centre norm"
    setup = {"dim": DIM, "k": 10, "queries": args.queries, "nprobe": args.nprobe, "data": data}
    record(Path(__file__).with_suffix(".json"), {"setup": setup, "rows": rows})


if __name__ == "__main__":
    main()
