"""Resident memory of `vse serve` as a user meets it: after a few searches, and after the
first annotations (which load the caption pool and the tagger).

The index holds the 1,000 Flickr8k dev photos (built once with `vse index`, cached
under ``~/.cache/vsekit/bench/serve-memory-index``). The server runs the shipped default
model from this checkout's venv with ``VSEKIT_BACKEND=onnx`` (PyTorch is never
imported on that path). VmRSS is read from ``/proc`` after 5 searches, after the first
``/annotate/{id}`` (retried while the service answers 503) and after 5 more; VmHWM is
the peak.

Run: python benchmarks/serve_memory.py [--photos 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import record  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
F8K = ROOT.parent / "shared" / "data" / "flickr8k"
QUERIES = ["a dog", "a man on a bike", "two dogs playing in the snow", "children playing",
           "a red car"]  # fmt: skip


def dev_folder(n: int) -> Path:
    """A folder with copies of the first ``n`` dev photos (cached)."""
    folder = Path(f"~/.cache/vsekit/bench/serve-memory-photos-{n}").expanduser()
    if not folder.is_dir():
        tmp = folder.with_name(folder.name + ".tmp")
        tmp.mkdir(parents=True, exist_ok=True)
        names = (F8K / "Flickr_8k.devImages.txt").read_text().split()
        for name in names[:n]:
            copy = tmp / name  # a copy: links out of the folder are not indexed
            if not copy.exists():
                shutil.copyfile(F8K / "images" / name, copy)
        tmp.rename(folder)
    return folder


def vm(pid: int) -> dict[str, float]:
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    kb = {
        ln.split(":")[0]: int(ln.split()[1]) for ln in status if ln.startswith(("VmRSS", "VmHWM"))
    }
    return {"rss_mb": round(kb["VmRSS"] / 1024, 1), "peak_mb": round(kb["VmHWM"] / 1024, 1)}


def get(url: str) -> bytes:
    for _ in range(1200):  # a 503 while the service prepares: retry, as the page does
        try:
            return urllib.request.urlopen(url, timeout=120).read()
        except urllib.error.HTTPError as e:
            if e.code != 503:
                raise
            time.sleep(0.5)
        except urllib.error.URLError:  # not listening yet
            time.sleep(0.5)
    raise TimeoutError(url)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--photos", type=int, default=1000)
    args = ap.parse_args()
    folder = dev_folder(args.photos)
    index = Path(f"~/.cache/vsekit/bench/serve-memory-index-{args.photos}").expanduser()
    env = {**os.environ, "VSEKIT_BACKEND": "onnx"}
    vse = [sys.executable, "-m", "vsekit"]
    subprocess.run([*vse, "index", str(folder), "--index", str(index), "--quiet"], env=env,
                   check=True)  # fmt: skip
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [*vse, "serve", "--index", str(index), "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    out: dict = {}
    try:
        t0 = time.perf_counter()
        get(f"{base}/health")
        out["started"] = {**vm(proc.pid), "seconds": round(time.perf_counter() - t0, 1)}
        ids = []
        for q in QUERIES:
            res = json.loads(get(f"{base}/search?q={q.replace(' ', '+')}&k=20"))["results"]
            ids += [r["id"] for r in res]
        out["after_5_searches"] = vm(proc.pid)
        t0 = time.perf_counter()
        get(f"{base}/annotate/{ids[0]}")
        out["after_first_annotate"] = {**vm(proc.pid),
                                       "seconds": round(time.perf_counter() - t0, 1)}  # fmt: skip
        for i in ids[1:6]:
            get(f"{base}/annotate/{i}")
        out["after_6_annotates"] = vm(proc.pid)
    finally:
        proc.terminate()
        proc.wait()
    path = Path(__file__).with_suffix(".json")
    rec = record(path, {"command": "python benchmarks/serve_memory.py"
                        + (f" --photos {args.photos}" if args.photos != 1000 else ""),
                        "photos": args.photos, **out})  # fmt: skip
    print(json.dumps({k: rec[k] for k in out}, indent=1))


if __name__ == "__main__":
    main()
