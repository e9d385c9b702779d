"""Time vsekit's retrieval metrics against the per-query argsort loop of the original
VSE++ evaluation, on a random 5,000-image x 25,000-caption similarity matrix.

Run: python benchmarks/metrics_speed.py   (writes benchmarks/metrics_speed.json)
"""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import record  # noqa: E402

from vsekit.lab.eval import retrieval_metrics  # noqa: E402

N_IMAGES, PER_IMAGE = 5000, 5


def vsepp_loop(sims: np.ndarray, c2i: np.ndarray) -> dict[str, float]:
    """The VSE++ ``i2t`` / ``t2i`` functions: argsort every query, find the target."""
    n_img, n_cap = sims.shape
    ranks_i = np.zeros(n_img)
    for i in range(n_img):
        inds = np.argsort(sims[i])[::-1]
        ranks_i[i] = min(np.where(inds == j)[0][0] for j in np.flatnonzero(c2i == i))
    ranks_t = np.zeros(n_cap)
    for j in range(n_cap):
        inds = np.argsort(sims[:, j])[::-1]
        ranks_t[j] = np.where(inds == c2i[j])[0][0]
    out = {}
    for d, r in (("i2t", ranks_i), ("t2i", ranks_t)):
        for k in (1, 5, 10):
            out[f"{d}_r{k}"] = 100.0 * np.mean(r < k)
    out["rsum"] = sum(out[f"{d}_r{k}"] for d in ("i2t", "t2i") for k in (1, 5, 10))
    return out


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    rng = np.random.default_rng(0)
    c2i = np.repeat(np.arange(N_IMAGES), PER_IMAGE)
    sims = rng.standard_normal((N_IMAGES, N_IMAGES * PER_IMAGE), dtype=np.float32)
    sims[c2i, np.arange(len(c2i))] += 2.5  # a plausible, tie-free score distribution
    rss_before = peak_rss_mb()

    t0 = time.perf_counter()
    ours = retrieval_metrics(sims, c2i)
    t_ours = time.perf_counter() - t0
    extra_mb = peak_rss_mb() - rss_before

    t0 = time.perf_counter()
    ref = vsepp_loop(sims, c2i)
    t_ref = time.perf_counter() - t0

    assert abs(ours["rsum"] - ref["rsum"]) < 1e-6, (ours["rsum"], ref["rsum"])
    res = record(
        Path(__file__).with_suffix(".json"),
        {
            "benchmark": "retrieval metrics, 5,000 images x 25,000 captions (float32)",
            "matrix_mb": sims.nbytes / 2**20,
            "vsekit_s": round(t_ours, 3),
            "vsepp_argsort_loop_s": round(t_ref, 3),
            "speedup": round(t_ref / t_ours, 1),
            "vsekit_peak_extra_mb": round(extra_mb, 1),
            "rsum_vsekit": ours["rsum"],
            "rsum_vsepp_loop": ref["rsum"],
        },
    )
    print({k: v for k, v in res.items() if k != "machine"})


if __name__ == "__main__":
    main()
