"""First use against warm use: ``vse index`` of 100 photos, then ``vse annotate`` of one,
from an empty cache and again with the cache filled, each in a fresh process.

The first index computes the caption bank (the captions the hubness penalty of photos
is measured against); the first annotation computes the caption pool's embeddings.
Both are cached under ``$VSEKIT_CACHE``. Reported: wall times, the cold/warm ratio, and
what the user saw on stderr while waiting (progress lines), so that "no silent wait"
is measured, not assumed.

Run: python benchmarks/cold_start.py [--photos 100]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import record  # noqa: E402

FLICKR8K = Path(__file__).resolve().parents[2] / "shared" / "data" / "flickr8k"


def run(argv: list[str], cache: Path) -> tuple[float, list[str]]:
    import os

    env = {**os.environ, "VSEKIT_CACHE": str(cache), "PYTHONUNBUFFERED": "1"}
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "vsekit", *argv], env=env, capture_output=True,
                       text=True, check=True)  # fmt: skip
    return round(time.perf_counter() - t0, 2), r.stderr.strip().splitlines()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--photos", type=int, default=100)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp())
    photos = work / "photos"
    photos.mkdir()
    for p in sorted((FLICKR8K / "images").glob("*.jpg"))[: args.photos]:
        shutil.copy2(p, photos / p.name)
    cache = work / "cache"
    one = str(next(photos.iterdir()))
    out = {}
    for phase in ("cold", "warm"):
        idx = work / f"index-{phase}"
        t_index, err_index = run(["index", str(photos), "--index", str(idx), "--quiet"], cache)
        t_ann, err_ann = run(["annotate", one, "--k", "3"], cache)
        out[phase] = {
            "index_seconds": t_index,
            "index_stderr": err_index,
            "annotate_seconds": t_ann,
            "annotate_stderr": err_ann,
        }
    res = record(
        Path(__file__).with_suffix(".json"),
        {
            "command": "python benchmarks/cold_start.py " + " ".join(sys.argv[1:]),
            "photos": args.photos,
            **out,
            "ratio_index_cold_vs_warm": round(
                out["cold"]["index_seconds"] / out["warm"]["index_seconds"], 2
            ),
            "ratio_annotate_cold_vs_warm": round(
                out["cold"]["annotate_seconds"] / out["warm"]["annotate_seconds"], 2
            ),
        },  # fmt: skip
    )
    shutil.rmtree(work, ignore_errors=True)
    for phase in ("cold", "warm"):
        print(phase, res[phase]["index_seconds"], res[phase]["annotate_seconds"])


if __name__ == "__main__":
    main()
