"""Start time, memory and install size of the command a user runs, against the path it
replaces, in one run (alternating, so both see the same machine).

* the size of a fresh venv with the built wheel (no PyTorch), and whether PyTorch came;
  the commands below run from that venv, as a user who ran ``pip install`` would;
* ``vse --version``: the wheel's against the commit before this work (``--old-rev``, run
  from a git worktree with the development venv, which has PyTorch);
* ``vse search "text"`` over an index, from process start to printed results: the
  wheel's (ONNX Runtime) against the PyTorch backend in the development venv
  (``VSEKIT_BACKEND=torch``, the path every search took before). An index records the
  image encoder that built it and the PyTorch backend (float32) rightly refuses one
  built by the int8 default, so its runs read a copy of the same index whose recorded
  encoder is relabelled to the float32 one: the same 7,000 vectors and files, and the
  timed work (start, load the model, encode the query, search) is the same;
* ``vse serve`` resident memory after 5 searches, for both.

Repeated runs; minimum and median. Run:
    python benchmarks/startup.py --index ~/.cache/vsekit/index-flickr8k [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import record  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
QUERY = "two dogs playing in the snow"


def timed(cmd: list[str], env: dict | None = None, cwd: Path | None = None) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env, cwd=cwd)
    return time.perf_counter() - t0


def summary(xs: list[float]) -> dict:
    return {"min_s": round(min(xs), 3), "median_s": round(statistics.median(xs), 3),
            "runs": [round(x, 3) for x in xs]}  # fmt: skip


def relabelled_for_torch(index: str, tmp: str) -> str:
    """A copy of ``index`` whose recorded encoder is the PyTorch backend's (see above)."""
    import sqlite3

    out = Path(tmp) / "index-torch"
    shutil.copytree(index, out, ignore=shutil.ignore_patterns("*.lock"))
    code = "import vsekit; print(vsekit.load_model(backend='torch').fingerprint)"
    fp = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                        text=True).stdout.strip()  # fmt: skip
    with sqlite3.connect(out / "index.sqlite") as db:
        db.execute("UPDATE meta SET value = ? WHERE key = 'fingerprint'", (fp,))
    return str(out)


def serve_rss_mb(index: str, python: str, backend: str) -> float:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "VSEKIT_BACKEND": backend}
    proc = subprocess.Popen(
        [python, "-m", "vsekit", "serve", "--index", index, "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).read()
                break
            except OSError:
                time.sleep(0.1)
        for q in ["a dog", "a man on a bike", QUERY, "children playing", "a red car"]:
            url = f"http://127.0.0.1:{port}/search?q={q.replace(' ', '+')}&k=20"
            urllib.request.urlopen(url, timeout=60).read()
        status = Path(f"/proc/{proc.pid}/status").read_text()
        kb = int(next(ln for ln in status.splitlines() if ln.startswith("VmRSS")).split()[1])
        return round(kb / 1024, 1)
    finally:
        proc.terminate()
        proc.wait()


def install(tmp: str) -> tuple[dict, Path]:
    """Build the wheel and install it in a fresh venv under ``tmp``."""
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    shutil.rmtree(REPO / "build", ignore_errors=True)  # setuptools would reuse stale copies
    build = [sys.executable, "-m", "build", "--wheel", "--outdir", tmp, str(REPO)]
    subprocess.run(build, check=True, **quiet)
    wheel = next(Path(tmp).glob("vsekit-*.whl"))
    venv = Path(tmp) / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin/pip"), "install", "-q", str(wheel)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    torch = subprocess.run([str(venv / "bin/python"), "-c", "import torch"],
                           capture_output=True).returncode == 0  # fmt: skip
    du = subprocess.run(["du", "-sm", str(venv)], capture_output=True, text=True, check=True)
    return {"wheel_mb": round(wheel.stat().st_size / 2**20, 1),
            "venv_mb": int(du.stdout.split()[0]), "torch_installed": torch}, venv  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--index", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--old-rev", default="8f4755e")
    args = ap.parse_args()
    index = str(Path(args.index).expanduser())
    tmp = tempfile.mkdtemp()
    torch_index = relabelled_for_torch(index, tmp)
    installed, venv = install(tmp)
    user = str(venv / "bin" / "python")
    old = Path(tempfile.mkdtemp()) / "old"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "-q", "--detach", str(old),
                    args.old_rev], check=True)  # fmt: skip
    try:
        old_env = {**os.environ, "PYTHONPATH": str(old / "src")}
        version = {"new": [], "old": []}
        search = {"onnx": [], "torch": []}
        for _ in range(args.runs):
            version["new"].append(timed([user, "-m", "vsekit", "--version"]))
            version["old"].append(
                timed([sys.executable, "-m", "vsekit", "--version"], old_env, cwd=old)
            )
            for backend, python, idx in (("onnx", user, index),
                                         ("torch", sys.executable, torch_index)):  # fmt: skip
                env = {**os.environ, "VSEKIT_BACKEND": backend}
                cmd = [python, "-m", "vsekit", "search", QUERY, "--index", idx]
                search[backend].append(timed(cmd, env))
        rss = {"onnx": serve_rss_mb(index, user, "onnx"),
               "torch": serve_rss_mb(torch_index, sys.executable, "torch")}  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(old)])
        shutil.rmtree(old.parent, ignore_errors=True)
    n_images = json.loads(
        subprocess.run([sys.executable, "-c", (
            "import json, sys; from vsekit.index import Collection; "
            f"print(json.dumps(len(Collection({index!r}))))")],
            capture_output=True, text=True, check=True).stdout)  # fmt: skip
    out = record(
        Path(__file__).with_suffix(".json"),
        {
            "command": "python benchmarks/startup.py " + " ".join(sys.argv[1:]),
            "index_images": n_images,
            "version": {k: summary(v) for k, v in version.items()},
            "old_rev": args.old_rev,
            "search": {k: summary(v) for k, v in search.items()},
            "serve_rss_mb_after_5_queries": rss,
            "install": installed,
        },
    )
    print(json.dumps({k: out[k] for k in ("version", "search", "serve_rss_mb_after_5_queries",
                                          "install")}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
