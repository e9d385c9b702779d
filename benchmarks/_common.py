"""Helpers for benchmark scripts: machine description and recording results."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
from collections.abc import Callable
from pathlib import Path


def machine() -> dict:
    import numpy
    import torch

    from vsekit.runtime.precision import cpu_info, cpu_name

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    info = cpu_info()
    return {
        "cpu": cpu_name(),
        "cpu_flags": sorted(info.features),
        "int8_class": info.int8_class,
        "gpu": gpu,
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "platform": platform.platform(),
        # other work on the CPU during the run (1, 5, 15 min; 2 cores: above 2 is shared)
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def spread_rows(spread: dict) -> list[str]:
    """Markdown rows ``| name | N-crop | rsum | i2t R@1 | t2i R@1 |`` (mean ± std) from
    ``{"name, N-crop index": {"rsum": {"mean", "std"}, ...}}``."""
    rows = []
    for label, sp in spread.items():
        name, index = label.rsplit(", ", 1)
        cells = " | ".join(f"{sp[k]['mean']:.1f} ± {sp[k]['std']:.1f}"
                           for k in ("rsum", "i2t_r1", "t2i_r1"))  # fmt: skip
        rows.append(f"| {name} | {index.split()[0]} | {cells} |")
    return rows


def record(path: Path, results: dict, *, if_changed: bool = False) -> dict:
    """Write ``results`` with the machine and the date to ``path`` (JSON).

    ``if_changed``: for a report regenerated from recorded results, keep the file as it
    is (its date and machine those of the run that last changed it) when ``results``
    equal what it holds, so that regenerating it on another day or machine is no diff."""
    from vsekit.fsio import atomic_write

    if if_changed and path.is_file():
        before = json.loads(path.read_text())
        if {k: v for k, v in before.items() if k not in ("date", "machine")} == json.loads(
            json.dumps(results)
        ):
            return before
    out = {"date": dt.date.today().isoformat(), "machine": machine(), **results}
    atomic_write(path, json.dumps(out, indent=2) + "\n")  # never half-written
    return out


def run_best(run: Path) -> dict:
    """The selection figures of a finished ``train_run``: its best epoch's rsum on the
    run's selection split, that epoch, the epochs run, and the wall time ``done.json``
    recorded."""
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x]
    rows = [r for r in rows if "rsum" in r]
    best = max(rows, key=lambda r: r["rsum"])
    done = json.loads((run / "done.json").read_text())
    return {"slice_rsum": round(best["rsum"], 2), "best_epoch": best["epoch"],
            "epochs_run": len(rows), "train_seconds": round(done["seconds"], 1)}  # fmt: skip


def die_with_parent(prctl: Callable[[int, int], int], parent: int) -> None:
    """Run in a child before it starts (``preexec_fn``): the kernel sends it SIGTERM when
    the thread that started it exits (``prctl(PR_SET_PDEATHSIG)``; that thread waits on
    the child, so: when ``parent`` dies), so a killed runner leaves no trainer behind to
    train its cell beside the next runner's. Only ``prctl`` (looked up in the parent, so
    nothing here loads a library after the fork) and ``getppid`` run here."""
    if prctl(1, 15) != 0:  # PR_SET_PDEATHSIG, SIGTERM
        os._exit(1)
    if os.getppid() != parent:  # the parent died before the call above took effect
        os._exit(1)


def run_child(cmd: list[str], cwd: Path, pass_fds: tuple[int, ...] = ()) -> int:
    """``cmd``'s exit code, waiting for it in the calling thread (the child dies when that
    thread exits: keep this a blocking call, not a ``Popen`` left to another thread). On
    Linux it dies with this process, and it inherits ``pass_fds``: a lock passed there is
    held until both have exited."""
    import ctypes
    import functools
    import subprocess
    import sys

    on_death = None
    if sys.platform.startswith("linux"):
        prctl = ctypes.CDLL(None, use_errno=True).prctl
        on_death = functools.partial(die_with_parent, prctl, os.getpid())
    return subprocess.run(cmd, cwd=cwd, pass_fds=pass_fds, preexec_fn=on_death).returncode


def train_run(
    run: Path,
    config: str,
    sets: list[str],
    root: Path,
    collapsed_ok: bool = False,
    pass_fds: tuple[int, ...] = (),
) -> None:
    """``vse train config --set ...`` into ``run`` unless ``run/done.json`` says it finished
    (a killed run resumes); ``done.json`` records the wall time. With ``collapsed_ok`` a
    run that did not start learning (``vse train`` exits 3) is finished too, not an error:
    where that is an outcome to count (MOE's failed starts). The trainer dies with this
    process and holds ``pass_fds`` (a runner's lock on the cell) while it runs
    (:func:`run_child`)."""
    import subprocess
    import sys
    import time

    if (run / "done.json").is_file():
        return
    cmd = [sys.executable, "-m", "vsekit", "train", config, "--run-dir", str(run),
           *[a for s in sets for a in ("--set", s)],
           *(["--resume"] if (run / "config.json").is_file() else [])]  # fmt: skip
    t0 = time.perf_counter()
    rc = run_child(cmd, root, pass_fds)
    if rc != 0 and not (collapsed_ok and rc == 3):
        raise subprocess.CalledProcessError(rc, cmd)
    done = {"seconds": time.perf_counter() - t0, "collapsed": rc == 3}
    (run / "done.json").write_text(json.dumps(done) + "\n")
