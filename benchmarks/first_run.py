"""The first ten minutes, from a fresh HOME and an empty vsekit cache each time, on the
first N photos of the Flickr8k dev split:

* ``images only``: a fresh process loads the default model and embeds the photos
  (``model.encode_image``, batches of 16 as ``vse index``): the floor a first index
  cannot go under;
* ``first index``: ``vse index PHOTOS --index DIR --quiet`` (everything a first index
  does: scan, embed, store, each photo's hubness penalty, the caption pool);
* ``cold annotate``: ``vse annotate PHOTO`` with nothing cached.

The two index phases alternate (images, index, index, images, ...) so that a shared
CPU's load falls on both alike; the ratio is of their medians. Reported with the load
average before and after each phase (2 cores: above 2 the CPU was shared).

Run: python benchmarks/first_run.py [--photos 1000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import record  # noqa: E402
from _dev import dev_split  # noqa: E402

EMBED_ONLY = """
import sys, vsekit
from pathlib import Path
paths = sorted(str(p) for p in Path(sys.argv[1]).iterdir())
vsekit.load_model("default").encode_image(paths, batch_size=16)
"""


def fresh_env(work: Path, tag: str) -> dict:
    home = work / f"home-{tag}"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "VSEKIT_CACHE"}
    return {**env, "HOME": str(home), "PYTHONUNBUFFERED": "1"}


def timed(argv: list[str], env: dict) -> dict:
    before = [round(x, 2) for x in os.getloadavg()]
    t0 = time.perf_counter()
    r = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    seconds = round(time.perf_counter() - t0, 2)
    if r.returncode != 0:
        raise SystemExit(f"{argv}: exit {r.returncode}\n{r.stderr[-2000:]}")
    return {"seconds": seconds, "load_before": before,
            "load_after": [round(x, 2) for x in os.getloadavg()],
            "stderr": r.stderr.strip().splitlines()[-6:],
            "stdout": r.stdout.strip().splitlines()[-6:]}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--photos", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default=str(Path(__file__).with_suffix(".json")))
    ap.add_argument("--cpu-shared", default="",
                    help="what else ran on the CPU meanwhile, recorded in the JSON")  # fmt: skip
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="vse-first-run-"))
    photos = work / "photos"
    photos.mkdir()
    paths = dev_split()[0][: args.photos]
    for p in paths:
        shutil.copy2(p, photos / Path(p).name)
    vse = str(Path(sys.executable).with_name("vse"))
    runs: dict[str, list] = {"images_only": [], "first_index": []}
    order = []
    for r in range(args.rounds):  # images, index, then index, images, ...
        order += ["images_only", "first_index"][:: 1 if r % 2 == 0 else -1]
    for k, phase in enumerate(order):
        env = fresh_env(work, f"{phase}-{k}")
        if phase == "images_only":
            argv = [sys.executable, "-c", EMBED_ONLY, str(photos)]
        else:
            argv = [vse, "index", str(photos), "--index", str(work / f"index-{k}"), "--quiet"]
        res = timed(argv, env)
        runs[phase].append(res)
        print(f"{phase}: {res['seconds']} s (load {res['load_before']})", file=sys.stderr)
    one = str(photos / Path(paths[0]).name)
    annotate = timed([vse, "annotate", one], fresh_env(work, "annotate"))
    print(f"cold annotate: {annotate['seconds']} s", file=sys.stderr)
    med = {k: statistics.median(r["seconds"] for r in v) for k, v in runs.items()}
    shutil.rmtree(work, ignore_errors=True)
    record(Path(args.out), {
        "command": shlex.join(["python", "benchmarks/first_run.py", *sys.argv[1:]]),
        "cpu_shared": args.cpu_shared or "nothing else declared; see each phase's load average",
        "photos": args.photos,
        "order": order,
        "images_only_seconds": [r["seconds"] for r in runs["images_only"]],
        "first_index_seconds": [r["seconds"] for r in runs["first_index"]],
        "median_images_only_seconds": med["images_only"],
        "median_first_index_seconds": med["first_index"],
        "ratio_first_index_to_images_only": round(med["first_index"] / med["images_only"], 3),
        "cold_annotate_seconds": annotate["seconds"],
        "runs": runs,
        "cold_annotate": annotate,
    })  # fmt: skip


if __name__ == "__main__":
    main()
