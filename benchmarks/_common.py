"""Helpers for benchmark scripts: machine description and recording results."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
from pathlib import Path


def machine() -> dict:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import numpy
    import torch

    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "platform": platform.platform(),
    }


def record(path: Path, results: dict) -> dict:
    """Write ``results`` with the machine and the date to ``path`` (JSON)."""
    out = {"date": dt.date.today().isoformat(), "machine": machine(), **results}
    path.write_text(json.dumps(out, indent=2) + "\n")
    return out
