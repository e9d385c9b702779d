"""A bounded load test of the HTTP API: `vse serve` in its own process, requests from
this one, against the same searches called in-process as the baseline.

The queries are the first captions of the Flickr8k dev images (default 200), cycled
until ``--requests`` have been sent, by ``--concurrency`` client threads. Reports
requests/s, p50 and p99 latency over HTTP, and the same for the library call
``search_text`` in this process (one at a time), on the same index and model.

Run: python benchmarks/http_load.py --index ~/.cache/vsekit/index-flickr8k
         [--requests 1000] [--concurrency 4] [--port 8765]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import record  # noqa: E402

from vsekit.index.query import open_collection as open_index  # noqa: E402
from vsekit.index.query import search_text  # noqa: E402
from vsekit.lab.data import load_dataset  # noqa: E402

FLICKR8K = Path(__file__).resolve().parents[2] / "shared" / "data" / "flickr8k"


def queries(n: int) -> list[str]:
    dev = load_dataset(FLICKR8K).split("dev")
    first: dict[int, str] = {}
    for text, i in zip(dev.texts, dev.caption_to_image, strict=True):
        first.setdefault(int(i), text)
    return [first[k] for k in sorted(first)][:n]


def ms(x: list[float], p: float) -> float:
    return round(float(np.percentile(x, p)) * 1000, 2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--index", required=True)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("--k", type=int, default=20)
    args = ap.parse_args()
    qs = queries(args.queries)

    coll, model = open_index(args.index)
    search_text(coll, model, qs[0], args.k)
    lib = []
    for q in qs:
        t = time.perf_counter()
        search_text(coll, model, q, args.k)
        lib.append(time.perf_counter() - t)
    coll.close()

    cmd = [sys.executable, "-m", "vsekit", "serve", "--index", args.index,
           "--port", str(args.port)]  # fmt: skip
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{args.port}"
    try:
        with httpx2.Client(base_url=base, timeout=60) as c:
            for _ in range(600):
                try:
                    if c.get("/health").status_code == 200:
                        break
                except httpx2.TransportError:
                    time.sleep(0.1)
            c.get("/search", params={"q": qs[0], "k": args.k})

        def one(i: int, client: httpx2.Client) -> tuple[float, int]:
            t = time.perf_counter()
            r = client.get("/search", params={"q": qs[i % len(qs)], "k": args.k})
            return time.perf_counter() - t, r.status_code

        with (
            httpx2.Client(base_url=base, timeout=60) as c,
            ThreadPoolExecutor(args.concurrency) as pool,
        ):
            t0 = time.perf_counter()
            res = list(pool.map(lambda i: one(i, c), range(args.requests)))
            wall = time.perf_counter() - t0
    finally:
        server.terminate()
        server.wait(timeout=30)
    lat = [t for t, _ in res]
    row = {
        "index_images": len(coll.ids),
        "requests": args.requests,
        "concurrency": args.concurrency,
        "errors": sum(s != 200 for _, s in res),
        "http_requests_per_s": round(args.requests / wall, 1),
        "http_p50_ms": ms(lat, 50),
        "http_p99_ms": ms(lat, 99),
        "library_calls_per_s": round(len(lib) / sum(lib), 1),
        "library_p50_ms": ms(lib, 50),
        "library_p99_ms": ms(lib, 99),
    }
    print(row)
    record(Path(__file__).with_suffix(".json"), {"setup": {"k": args.k}, "result": row})


if __name__ == "__main__":
    main()
