"""What users see, before and after the two-layer redesign, in one run.

The same measurements on two code trees, alternating so that both see the same machine:
``--old`` (a checkout of the commit before the redesign, with its generated ONNX files)
and this working tree. Both run from the development venv on copies of one index, with
the same default model files:

* the default model's dev rsum end to end (``benchmarks/default_model.py --backend onnx``
  on the 1,000 dev JPEGs; deterministic, run once per tree);
* ``vse index`` throughput: ``--n`` Flickr8k photos into a fresh index (the photos'
  hubness penalties included), ``--rounds`` alternating rounds;
* ``vse search`` over the index, process start to printed results (``--runs``);
* ``vse serve`` resident memory after 5 searches.

Run: python benchmarks/layers.py --old /path/to/old/checkout --index INDEX
Writes benchmarks/layers.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import record  # noqa: E402
from startup import QUERY, serve_rss_mb  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
IMAGES = REPO.parent / "shared" / "data" / "flickr8k" / "images"


def env_for(tree: Path) -> dict:
    return {**os.environ, "PYTHONPATH": str(tree / "src")}


def run(cmd: list[str], tree: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=env_for(tree), cwd=tree)  # fmt: skip
    return time.perf_counter() - t0


def dev_rsum(tree: Path) -> dict:
    """The default's dev figures end to end: JPEGs and captions through the model the
    tree loads, ranked by ``retrieval_scores`` (what search uses); metrics in NumPy so
    that both trees compute them the same way."""
    code = f"""
import json, sys
import numpy as np
import vsekit
sys.path.insert(0, {str(REPO / "benchmarks")!r})
from _dev import dev_split
paths, texts, c2i = dev_split()
m = vsekit.load_model()
img = np.concatenate([m.encode_image(paths[a : a + 16]) for a in range(0, len(paths), 16)])
txt = m.encode_text(texts)
s = m.retrieval_scores(img, txt)
c2i = np.asarray(c2i)
t_rank = np.array([(s[:, j] > s[c2i[j], j]).sum() for j in range(len(texts))])
i_rank = np.array([min((s[i] > s[i, j]).sum() for j in np.flatnonzero(c2i == i))
                   for i in range(len(paths))])
out = {{f"i2t_r{{k}}": 100 * float((i_rank < k).mean()) for k in (1, 5, 10)}}
out.update({{f"t2i_r{{k}}": 100 * float((t_rank < k).mean()) for k in (1, 5, 10)}})
out["rsum"] = sum(out.values())
print(json.dumps({{k: round(v, 2) for k, v in out.items()}}))
"""
    res = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True, env=env_for(tree), cwd=tree)  # fmt: skip
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", type=Path, required=True, help="checkout of the earlier commit")
    ap.add_argument("--index", required=True, help="an index of the Flickr8k photos")
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--skip-rsum", action="store_true")
    args = ap.parse_args()
    trees = {"before": args.old.resolve(), "after": REPO}
    res: dict = {name: {"index_s": [], "search_s": [], "serve_mb": []} for name in trees}
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        photos = Path(tmp) / "photos"
        photos.mkdir()
        for f in sorted(IMAGES.glob("*.jpg"))[: args.n]:
            shutil.copy(f, photos / f.name)
        copies = {}
        for name in trees:
            copies[name] = Path(tmp) / f"index-{name}"
            shutil.copytree(args.index, copies[name], ignore=shutil.ignore_patterns("*.lock"))
        for r in range(args.rounds):
            for name, tree in trees.items():
                idx = Path(tmp) / f"new-{name}-{r}"
                cmd = [py, "-m", "vsekit", "index", str(photos), "--index", str(idx), "--quiet"]
                res[name]["index_s"].append(run(cmd, tree))
        for _ in range(args.runs):
            for name, tree in trees.items():
                cmd = [py, "-m", "vsekit", "search", QUERY, "--index", str(copies[name])]
                res[name]["search_s"].append(run(cmd, tree))
        for name, tree in trees.items():
            old_pp = os.environ.get("PYTHONPATH")
            os.environ["PYTHONPATH"] = str(tree / "src")
            try:
                res[name]["serve_mb"].append(serve_rss_mb(str(copies[name]), py, "onnx"))
            finally:
                if old_pp is None:
                    os.environ.pop("PYTHONPATH")
                else:
                    os.environ["PYTHONPATH"] = old_pp
    for name, tree in trees.items():
        r = res[name]
        r["index_images_per_s"] = round(args.n / statistics.median(r["index_s"]), 2)
        r["search_median_s"] = round(statistics.median(r["search_s"]), 3)
        if not args.skip_rsum:
            r["dev"] = dev_rsum(tree)
    a, b = res["after"], res["before"]
    res["after_over_before"] = {
        "index_throughput": round(a["index_images_per_s"] / b["index_images_per_s"], 3),
        "search_start": round(a["search_median_s"] / b["search_median_s"], 3),
    }
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=trees["before"],
                         capture_output=True, text=True).stdout.strip()  # fmt: skip
    out = record(
        REPO / "benchmarks" / "layers.json",
        {"benchmark": "before/after the two-layer redesign, alternating, one run",
         "command": "python " + " ".join(sys.argv), "before_rev": rev, "photos": args.n,
         **res},
    )  # fmt: skip
    print({k: out[k] for k in ("before", "after", "after_over_before")})


if __name__ == "__main__":
    main()
