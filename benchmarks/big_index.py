"""Search beyond RAM at 1M and 10M photos of the default model's dimension (2,048).

**Realistic vectors.** The default model's embeddings of the 7,000 Flickr8k photos are
clustered (k-means, 64 centres); a synthetic photo is a centre (drawn by its cluster's
weight) plus noise shaped like the real within-cluster residuals (their top 512
principal directions, and an isotropic remainder of the same variance), scaled by one
factor ``sigma`` times a per-photo log-normal spread ``exp(tau g)``, then normalised.
``sigma`` and ``tau`` are calibrated so that the nearest-neighbour cosines of 7,000
synthetic photos match the real collection's (equal medians, closest 10-90% width);
the plot (``big_index_calibration.png``) and the JSON compare the two distributions.

**Streaming.** Rows are generated in chunks of 100,000, each from its own seed, written
to an int8 rows file (the index's ``--storage int8`` format, :mod:`vsekit.index.rows`)
while the exact top-10 of every query is kept up to date from the float32 chunk; the full
float32 matrix never exists. Each finished chunk is recorded (resumable).

**The index** is what ``vse index --storage int8 --max-ram`` builds: FAISS IVF-PQ chosen
by :func:`vsekit.index.ann.choose_spec` under the budget, trained on a sample and filled
from the int8 file. **Queries** are the default model's embeddings of 1,000 Flickr8k dev
captions. A separate process loads the index, memory-maps the rows, and times single
queries (PQ candidates re-ranked from the int8 rows, as the index's search does):
p50/p99 latency, recall@10 against exact float32 search, its peak RSS. At 1M the same
run also times today's in-RAM FAISS (IVF-Flat over float32 rows) for comparison.

Run (phases resume; ``--search-only`` re-times a built index, alone on the CPU):
  python benchmarks/big_index.py --rows 1000000 [--max-ram 4G] [--compare-flat]
  python benchmarks/big_index.py --rows 10000000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import record  # noqa: E402
from _dev import F8K, dev_split  # noqa: E402

from vsekit.fsio import atomic_write  # noqa: E402
from vsekit.index.ann import FaissSearcher, choose_spec, parse_size  # noqa: E402
from vsekit.index.rows import Int8RowFile, Int8Rows  # noqa: E402

HERE = Path(__file__).resolve().parent
WORK = Path("~/.cache/vsekit/bench").expanduser()
CHUNK = 100_000
K = 10
N_QUERIES = 1000
CENTRES = 64
RANK = 512


def real_vectors() -> tuple[np.ndarray, np.ndarray]:
    """The default model's embeddings of the 7,000 Flickr8k photos and of the dev
    captions (cached)."""
    imgs, caps = WORK / "flickr8k-default-images.npy", WORK / "flickr8k-default-dev-captions.npy"
    if not (imgs.is_file() and caps.is_file()):
        import vsekit

        m = vsekit.load_model()
        names = [*(F8K / "Flickr_8k.trainImages.txt").read_text().split(),
                 *(F8K / "Flickr_8k.devImages.txt").read_text().split()]  # fmt: skip
        paths = [str(F8K / "images" / n) for n in names]
        img = np.concatenate(
            [m.encode_image(paths[a : a + 256]) for a in range(0, len(paths), 256)]
        )
        _, texts, _ = dev_split()
        WORK.mkdir(parents=True, exist_ok=True)
        np.save(imgs, img.astype(np.float32))
        np.save(caps, m.encode_text(texts).astype(np.float32))
    return np.load(imgs), np.load(caps)


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def nn_sims(x: np.ndarray) -> np.ndarray:
    """Each row's cosine to its nearest other row."""
    s = x @ x.T
    np.fill_diagonal(s, -np.inf)
    return s.max(axis=1)


class Generator:
    """Synthetic photos shaped like the real ones (see the module docstring)."""

    def __init__(self, real: np.ndarray, seed: int = 0) -> None:
        import faiss

        km = faiss.Kmeans(real.shape[1], CENTRES, niter=20, seed=seed, spherical=True)
        km.train(real)
        _, assign = km.index.search(real, 1)
        assign = assign[:, 0]
        self.centres = np.stack([real[assign == c].mean(0) for c in range(CENTRES)])
        self.weights = np.bincount(assign, minlength=CENTRES) / len(real)
        resid = real - self.centres[assign]
        _, s, vt = np.linalg.svd(resid, full_matrices=False)
        var = s**2 / (len(real) - 1)
        self.basis = (np.sqrt(var[:RANK])[:, None] * vt[:RANK]).astype(np.float32)
        self.tail = float(np.sqrt(var[RANK:].sum() / real.shape[1]))  # per dimension
        self.sigma, self.tau = 1.0, 0.0

    def chunk(self, seed: int, n: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        c = rng.choice(CENTRES, size=n, p=self.weights)
        z = rng.standard_normal((n, RANK), dtype=np.float32)
        noise = z @ self.basis + self.tail * rng.standard_normal((n, self.basis.shape[1]),
                                                                 dtype=np.float32)  # fmt: skip
        # each photo its own spread (log-normal): some near their centre, some far out
        scale = self.sigma * np.exp(self.tau * rng.standard_normal((n, 1))).astype(np.float32)
        return unit(self.centres[c] + scale * noise)

    def _fit_sigma(self, real_nn: np.ndarray) -> np.ndarray:
        """Bisect ``sigma`` (for the current ``tau``) so the synthetic median nearest-
        neighbour cosine equals the real one; returns the synthetic nearest cosines."""
        lo, hi = 0.05, 4.0
        for _ in range(14):
            self.sigma = (lo + hi) / 2
            nn = nn_sims(self.chunk(12345, len(real_nn)))
            lo, hi = (self.sigma, hi) if np.median(nn) > np.median(real_nn) else (lo, self.sigma)
        return nn

    def calibrate(self, real: np.ndarray) -> dict:
        """Choose ``tau`` (the spread of per-photo noise scales) on a grid and ``sigma``
        by bisection, so that the nearest-neighbour cosines of ``len(real)`` synthetic
        photos match the real ones': equal medians, and the closest 10%-90% width."""
        real_nn = nn_sims(real)
        width = float(np.quantile(real_nn, 0.9) - np.quantile(real_nn, 0.1))
        best = None
        for tau in (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8):
            self.tau = tau
            nn = self._fit_sigma(real_nn)
            gap = abs(float(np.quantile(nn, 0.9) - np.quantile(nn, 0.1)) - width)
            if best is None or gap < best[0]:
                best = (gap, tau, self.sigma)
        _, self.tau, self.sigma = best
        return {"sigma": round(self.sigma, 4), "tau": self.tau,
                "target_median": round(float(np.median(real_nn)), 4),
                "target_width_10_90": round(width, 4)}  # fmt: skip


def plot_calibration(real: np.ndarray, synth: np.ndarray, out: Path) -> dict:
    a, b = nn_sims(real), nn_sims(synth)
    q = [0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99]
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3.5))
        bins = np.linspace(min(a.min(), b.min()), 1, 60)
        ax.hist(a, bins, alpha=0.6, label=f"real Flickr8k photos ({len(a):,})", density=True)
        ax.hist(b, bins, alpha=0.6, label=f"synthetic ({len(b):,})", density=True)
        ax.set_xlabel("cosine to the nearest other photo")
        ax.set_ylabel("density")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out, dpi=120)
    except ImportError:
        pass
    return {"quantiles": q, "real": np.quantile(a, q).round(4).tolist(),
            "synthetic": np.quantile(b, q).round(4).tolist()}  # fmt: skip


def build(args, work: Path, gen: Generator, queries: np.ndarray) -> dict:
    """Stream the rows into ``rows.i8`` and the exact top-10 into ``truth.npz``."""
    state_f = work / "state.json"
    state = json.loads(state_f.read_text()) if state_f.is_file() else {"chunks": 0, "seconds": 0}
    n_chunks = args.rows // CHUNK
    rows = Int8RowFile(work / "rows.i8", queries.shape[1])
    rows.truncate(state["chunks"] * CHUNK)  # drop a chunk a kill interrupted
    if state["chunks"]:
        t = np.load(work / "truth.npz")
        top_s, top_r = t["s"], t["r"]
    else:
        top_s = np.full((len(queries), K), -np.inf, np.float32)
        top_r = np.full((len(queries), K), -1, np.int64)
    for c in range(state["chunks"], n_chunks):
        t0 = time.perf_counter()
        x = gen.chunk(1000 + c, CHUNK)
        rows.append(x)
        rows.sync()
        s = queries @ x.T
        part = np.argpartition(-s, K, axis=1)[:, :K]
        all_s = np.concatenate([top_s, np.take_along_axis(s, part, 1)], 1)
        all_r = np.concatenate([top_r, part + c * CHUNK], 1)
        best = np.argsort(-all_s, axis=1, kind="stable")[:, :K]
        top_s, top_r = np.take_along_axis(all_s, best, 1), np.take_along_axis(all_r, best, 1)

        def save(tmp, s=top_s, r=top_r):
            with open(tmp, "wb") as fh:
                np.savez(fh, s=s, r=r)

        atomic_write(work / "truth.npz", save)
        state = {"chunks": c + 1, "seconds": state["seconds"] + time.perf_counter() - t0}
        atomic_write(state_f, json.dumps(state))
        print(f"chunk {c + 1}/{n_chunks} ({state['seconds']:.0f} s)", flush=True)
    return state


def build_index(args, work: Path, spec: str | None, nprobe: int) -> dict:
    f = work / f"ivf-{(spec or 'flat').replace(',', '_')}.index"
    info_f = f.with_suffix(".json")
    if f.is_file() and info_f.is_file():
        return json.loads(info_f.read_text())
    rows = Int8Rows(np.memmap(work / "rows.i8", np.uint8, "r", shape=(args.rows, 2052)), 2048)
    t0 = time.perf_counter()
    fs = FaissSearcher(rows, spec=spec, nprobe=nprobe)
    seconds = time.perf_counter() - t0
    fs.save(f)
    info = {"spec": spec, "nprobe": nprobe, "file": f.name, "build_seconds": round(seconds, 1),
            "index_bytes": f.stat().st_size}  # fmt: skip
    atomic_write(info_f, json.dumps(info))
    return info


SEARCH = r"""
import json, sys, time
import numpy as np
from vsekit.index.ann import FaissSearcher
from vsekit.index.rows import Int8Rows, for_scattered_reads
from vsekit.index.search import rerank
work, rows_n, index_file, spec, nprobe, rerank_n, flat, advise = sys.argv[1:9]
rows_n, nprobe, rerank_n, flat = int(rows_n), int(nprobe), int(rerank_n), flat == "1"
q = np.load(work + "/queries.npy")
truth = np.load(work + "/truth.npz")["r"]
fs = FaissSearcher.load(index_file, nprobe, None if spec == "-" else spec)
rows = Int8Rows(np.memmap(work + "/rows.i8", np.uint8, "r", shape=(rows_n, 2052)), 2048)
if advise == "1":  # as the index's search reads them (ScatteredRows)
    rows = for_scattered_reads(rows)
lat, got = [], []
for i in range(len(q)):  # one query at a time, as a user's search
    t = time.perf_counter()
    if flat:
        _, r = fs.search(q[i : i + 1], 10)
    else:
        _, cand = fs.search(q[i : i + 1], rerank_n)
        _, r = rerank(rows, q[i : i + 1], cand, None, 10)
    lat.append(time.perf_counter() - t)
    got.append(r[0])
recall = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, truth)]))
lat = np.array(lat[10:]) * 1000  # the first queries fault the file in
print(json.dumps({"p50_ms": round(float(np.median(lat)), 2),
                  "p99_ms": round(float(np.quantile(lat, 0.99)), 2),
                  "recall_at_10": round(recall, 4),
                  **{k: int(v.split()[0]) // 1024 for k, v in
                     (line.split(":", 1) for line in open("/proc/self/status"))
                     if k in ("VmHWM", "RssAnon", "RssFile")}}))
"""


def drop_page_cache() -> None:
    """Empty the kernel's page cache (root only), so that a search starts cold: its rows
    come from the disk, as after a reboot."""
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("1\n")
    except OSError as e:
        raise SystemExit(f"--cold: cannot drop the page cache ({e}); run as root") from None


def search(work: Path, rows: int, info: dict, rerank_n: int, flat: bool,
           advise: bool = True, cold: bool = False) -> dict:  # fmt: skip
    if cold:
        drop_page_cache()
    out = subprocess.run(
        [sys.executable, "-c", SEARCH, str(work), str(rows), str(work / info["file"]),
         info["spec"] or "-", str(info["nprobe"]), str(rerank_n), "1" if flat else "0",
         "1" if advise else "0"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--max-ram", default="4G")
    ap.add_argument("--spec", help="a FAISS index-factory string instead of choose_spec's")
    ap.add_argument("--rerank", type=int, nargs="+", default=[100, 250, 1000])
    ap.add_argument("--nprobe", type=int, nargs="+", default=[64, 128, 256])
    ap.add_argument("--cold", action="store_true",
                    help="empty the page cache before each search process (root)")  # fmt: skip
    ap.add_argument("--no-advise", action="store_true",
                    help="re-rank through the plain mapping (readahead), to compare")  # fmt: skip
    ap.add_argument("--compare-flat", action="store_true", help="also in-RAM IVF-Flat")
    ap.add_argument("--build-only", action="store_true", help="stop once the index is built")
    ap.add_argument("--search-only", action="store_true", help="time a built index only")
    args = ap.parse_args()
    if args.rows % CHUNK:
        raise SystemExit(f"--rows: a multiple of {CHUNK}")
    work = WORK / f"big-{args.rows}"
    work.mkdir(parents=True, exist_ok=True)
    real, caps = real_vectors()
    queries = caps[np.random.default_rng(0).choice(len(caps), N_QUERIES, replace=False)]
    np.save(work / "queries.npy", queries)
    gen = Generator(real)
    cal = gen.calibrate(real)
    out_json = HERE / f"big_index_{args.rows // 1_000_000}m.json"
    results = json.loads(out_json.read_text()) if out_json.is_file() else {}
    synth = gen.chunk(12345, len(real))
    plot = HERE / "big_index_calibration.png"
    results["calibration"] = {**cal, **plot_calibration(real, synth, plot)}
    t0 = time.perf_counter()
    budget = parse_size(args.max_ram)
    spec, nprobe = choose_spec(args.rows, 2048, budget)
    if spec is None:  # below the budget's threshold: the in-RAM structure is chosen
        raise SystemExit(
            f"{args.rows:,} rows fit {args.max_ram}: IVF-Flat; pass a smaller --max-ram"
        )
    results["chosen_spec"] = {"max_ram": args.max_ram, "spec": spec, "nprobe": nprobe}
    spec = args.spec or spec
    if args.search_only and not (work / "state.json").is_file():
        raise SystemExit(f"{work}: nothing built yet; run without --search-only")
    state = build(args, work, gen, queries)
    results["generate_and_truth_seconds"] = round(state["seconds"], 1)
    info = build_index(args, work, spec, nprobe)
    if args.compare_flat:
        flat = build_index(args, work, None, 32)
    info = {**info, "max_ram": args.max_ram,
            "rows_file_bytes": (work / "rows.i8").stat().st_size}  # fmt: skip
    print("index", info, f"({time.perf_counter() - t0:.0f} s)", flush=True)
    if args.build_only:
        return
    sweep = {}
    for npr in args.nprobe:
        for rr in args.rerank:
            r = search(work, args.rows, dict(info, nprobe=npr), rr, False,
                       not args.no_advise, args.cold)  # fmt: skip
            sweep[f"nprobe {npr}, rerank {rr}"] = r
            print(npr, rr, r, flush=True)
    mode = (f"{'cold' if args.cold else 'shared'} page cache, "
            f"{'readahead' if args.no_advise else 'prefetched'} re-ranking")  # fmt: skip
    key = f"{spec} | {mode}"
    sweep = {**results.get("ivfpq", {}).get(key, {}).get("sweep", {}), **sweep}  # runs add up
    results.setdefault("ivfpq", {})[key] = {
        "index": info,
        "page_cache": "emptied before each search process"
        if args.cold
        else "as the previous runs left it (the rows file does not fit beside the rest)",
        "rows_mapping": "plain (kernel readahead)"
        if args.no_advise
        else "vsekit.index.rows.ScatteredRows (MADV_RANDOM, MADV_WILLNEED on the candidates)",
        "sweep": sweep,
        "disk_bytes": info["rows_file_bytes"] + info["index_bytes"],
        "cpu_note": os.environ.get("BENCH_NOTE", ""),
        "command": "python benchmarks/big_index.py " + " ".join(sys.argv[1:]),
        "commands": [
            *results.get("ivfpq", {}).get(key, {}).get("commands", []),
            "python benchmarks/big_index.py " + " ".join(sys.argv[1:]),
        ],  # fmt: skip
    }
    if args.compare_flat:
        results["ivf_flat"] = {**flat, "search": search(work, args.rows, flat, 0, True)}
        print("flat", results["ivf_flat"], flush=True)
    record(out_json, results)
    print(json.dumps(results["ivfpq"][key], indent=1))


if __name__ == "__main__":
    main()
