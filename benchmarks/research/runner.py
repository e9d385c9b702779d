"""The claims grid's runner: which cell next, one runner per cell (locks), resume after a
kill, and each cell recorded whole.

A cell is one ``vse train`` run in ``RUNS/<cell>`` (under ``~/.cache/vsekit``, never in
the repository), scored on the selection slice and on dev, and recorded as one JSON file
(a temporary file, then a rename). A recorded cell is not run again, unless its protocol
lists it again (the fair protocol's ``runs_on``: a run the cap stopped resumes with a
higher cap, and its record is replaced); a killed run resumes from its last epoch, since
its run folder holds its checkpoints. Several runners may share
a grid (one per core): each takes a cell by an exclusive ``flock`` on
``RUNS/<cell>.lock``, which the kernel drops when the runner and its trainer (which dies
with the runner and inherits the lock) have both exited.

The fair grid (``fair_protocol.py``) runs in the background, niced, one runner:

    nohup nice -n 19 .venv/bin/python benchmarks/research/claims.py --run fair \\
        > ~/.cache/vsekit/claims/fair-runner.log 2>&1 &

On an x86 CPU without AVX512_BF16 the cells' bf16 GEMMs run in fp32 kernels on the same
bf16 values (``vsekit.lab.train.bf16``; each cell records ``bf16_gemms``). It builds the
2-crop ResNet-50 store first if it is missing; the build records its own time
(``seconds`` in the store's ``progress.json``), which varies with the CPU. To stop it,
kill its process id (``kill PID``; its trainer gets SIGTERM as it dies, and the cell's
lock lasts until the trainer has exited); the same command resumes: the cell it was
training resumes from its last finished epoch. Its cells land in
``benchmarks/research/cells_fair/``; commit them, and regenerate the report
(``python benchmarks/research/claims.py``).
"""

from __future__ import annotations

import datetime as dt
import fcntl
import functools
import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

from _common import machine, train_run

from vsekit.fsio import file_sha256

from . import fair_protocol as fair
from . import families, scoring
from .protocol import CELLS, REG_BASE, REG_TEXT, RUNS, STORE, Cell, load_cells
from .scoring import F8K, score_table2

ROOT = Path(__file__).resolve().parents[2]
FAIR_CELLS = fair.CELLS

_HELD: dict[str, int] = {}  # cell -> the descriptor whose flock this process holds


def claim(name: str) -> bool:
    """Take cell ``name`` for this process: an exclusive ``flock`` on
    ``RUNS/<name>.lock``, held until :func:`release` and, through :func:`held`, by the
    cell's trainer until it exits (the kernel drops it once both have: a killed runner's
    cell is free again when its trainer has stopped, and its run resumes from the last
    epoch; a runner restarted before then takes another cell). Lock files are never
    removed, so two runners always lock the same file."""
    RUNS.mkdir(parents=True, exist_ok=True)
    fd = os.open(RUNS / f"{name}.lock", os.O_CREAT | os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    _HELD[name] = fd
    return True


def held(name: str) -> tuple[int, ...]:
    """The lock descriptor this process holds on cell ``name``, for its trainer to inherit:
    the lock then lasts until the trainer has exited too, so a runner killed mid-cell
    frees the cell only once its trainer (sent SIGTERM as the runner dies) has stopped."""
    return (_HELD[name],) if name in _HELD else ()


def release(name: str) -> None:
    fd = _HELD.pop(name, None)
    if fd is not None:
        os.close(fd)


def git_commit() -> str:
    """``$VSEKIT_GIT_COMMIT`` where set (a copy of the tree on another machine, whose
    ``.git``, if any, may be older than the tree), else HEAD."""
    if commit := os.environ.get("VSEKIT_GIT_COMMIT"):
        return commit
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    except OSError:  # no git there
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


@functools.cache
def store_digest(store: str = STORE) -> dict[str, str]:
    """The sha256 of each feature file of the fair store the cells read (``pooled.f32``,
    ``fne.i8``), of the FNE statistics fitted on train (``fne_stats.safetensors``), and of
    the fit's settings (``meta.json``'s ``fne``, as ``fne_fit``), so that
    a cell says which extraction it trained on: a store rebuilt on another machine may
    differ in float rounding, and a ternary value near a threshold may flip."""
    path = Path(store).expanduser()
    out = {}
    for name in ("pooled.f32", "fne.i8", "fne_stats.safetensors"):
        if (path / name).is_file():
            out[name] = file_sha256(path / name)
    fne = json.loads((path / "meta.json").read_text()).get("fne")
    out["fne_fit"] = hashlib.sha256(json.dumps(fne, sort_keys=True).encode()).hexdigest()
    return out


def write_cell(folder: Path, name: str, record: dict) -> None:
    """Record a cell whole or not at all (a temporary file, then a rename)."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{name}.tmp"
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    tmp.replace(folder / f"{name}.json")


def run_log(run: Path) -> tuple[list[dict], list[dict], float]:
    """``(epochs, events, train seconds)`` from a finished run's folder: the epochs from
    ``metrics.jsonl`` (one record each: the trainer drops the records past its last
    checkpoint when it resumes, and this keeps an epoch's last record should one still
    repeat), the events (decays, early stop, switch) from the
    last epoch's training state. The trainer's own clock runs on across a resume, which
    ``done.json``'s does not."""
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    by_epoch = {e["epoch"]: e for e in lines if "event" not in e}
    epochs = [by_epoch[k] for k in sorted(by_epoch)]
    last = json.loads((run / "last.json").read_text())["path"]
    events = json.loads((run / last / "state.json").read_text()).get("events", [])
    state = json.loads((run / "done.json").read_text())
    seconds = max(state["seconds"], max((e.get("seconds", 0) for e in epochs), default=0))
    return epochs, events, seconds


def curve(epochs: list[dict]) -> dict[str, list]:
    """Each epoch's phase, training loss and slice rsum, as columns: the run's log kept in
    its record, since the run folder stays on the machine that trained it (and
    ``moe_start.py`` reads the loss). Loss to 4 decimals, rsum to 2."""
    return {
        "epoch": [e["epoch"] for e in epochs],
        "phase": [e.get("phase") for e in epochs],
        "loss": [round(e["loss"], 4) for e in epochs],
        "rsum": [round(e["rsum"], 2) for e in epochs],
    }


def epoch_seconds(epochs: list[dict]) -> list[float]:
    """Each epoch's training time, from the trainer's clock (``seconds``, cumulative, in
    every epoch record; a repeated epoch's last record counts, as in :func:`run_log`)."""
    by_epoch = {e["epoch"]: e["seconds"] for e in epochs}
    clock = [by_epoch[k] for k in sorted(by_epoch)]
    return [round(b - a, 1) for a, b in zip([0.0, *clock[:-1]], clock, strict=True)]


def phases(epochs: list[dict]) -> dict[str, int]:
    """Epochs run under each loss (a curriculum run must show both)."""
    return {ph: sum(e.get("phase") == ph for e in epochs)
            for ph in dict.fromkeys(e.get("phase") for e in epochs) if ph}  # fmt: skip


def ensure_fair_store() -> None:
    """Build the 2-crop ResNet-50 store (and fit the FNE on train) if it is missing."""
    from vsekit.lab.data import load_dataset
    from vsekit.lab.train.config import DataConfig
    from vsekit.lab.train.features import ensure_store

    ensure_store(DataConfig(store=STORE, crops=2, features="fne"), load_dataset(F8K))


def at_first_cap(run: Path, before: dict) -> bool:
    """Whether ``run`` is still the run ``before`` recorded, ended by the first cap: its
    folder's config names that cap, and it holds as many epochs as ``before`` ran."""
    if not (run / "done.json").is_file():
        return False
    cap = json.loads((run / "config.json").read_text())["config"]["train"]["epochs"]
    return cap < fair.EXTENDED_CAP and len(run_log(run)[0]) == before["epochs_run"]


def yaml_value(v: object) -> str:
    """A ``--set`` value in the config's YAML."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v).lower()
    return f"{v:g}" if isinstance(v, float) else str(v)


def run_fair_cell(cell: fair.FairCell | fair.InstCell) -> dict:
    """Train ``cell`` (resuming a killed run), score it, and record it atomically."""
    import yaml

    run = RUNS / cell.name
    store = store_digest()  # the store as training reads it (once per runner: ~1 s a GB)
    t0 = time.perf_counter()
    margin = yaml.safe_load((ROOT / cell.config).read_text())["loss"]["margin"]
    settings = cell.settings(STORE, float(margin))
    before = load_cells(FAIR_CELLS).get(cell.name)
    if before is not None and not fair.runs_on(before):
        before = None  # (only a cell its protocol lists again is run again)
    if before is not None:  # the cap stopped it: it runs on
        settings["train.epochs"] = fair.EXTENDED_CAP
        if at_first_cap(run, before):  # not if a kill came after its extension finished
            (run / "done.json").unlink()  # so the trainer resumes it from its last epoch
    sets = [f"{k}={yaml_value(v)}" for k, v in settings.items()]
    # the code the training imports now, not HEAD once it ends (a resumed run's earlier
    # part may have trained with an earlier commit)
    commit = git_commit()
    train_run(run, cell.config, sets, ROOT, collapsed_ok=True, pass_fds=held(cell.name))
    epochs, events, seconds = run_log(run)
    meta = json.loads((run / "config.json").read_text())
    scores = scoring.score(cell, run)  # slice and dev at the slice's best epoch
    best = json.loads((run / "best.json").read_text()) if (run / "best.json").is_file() else {}
    config = meta["config"]  # the effective configuration the run trained with
    if before is not None:  # a resumed run's config.json still names its first cap
        config = {**config, "train": {**config["train"], "epochs": settings["train.epochs"]}}
    record = {
        "cell": cell.name,
        "protocol": "fair",
        "row": cell.row,
        **(
            {"recipe": cell.recipe.as_dict()}
            if isinstance(cell, fair.FairCell)
            else {
                "family": cell.family,
                "variant": cell.variant,
                "setting": cell.as_dict(),
                "shift": cell.shift,
            }  # fmt: skip
        ),
        "seed": cell.seed,
        "config_file": cell.config,
        "config": config,
        "date": dt.date.today().isoformat(),
        "git_commit": commit,
        "machine": machine(),
        "bf16_gemms": bf16_gemms(settings, epochs),
        "store_sha256": store,
        "train_seconds": round(seconds, 1),
        # this runner's part only: a resumed run's earlier part is in train_seconds
        "wall_seconds": round(time.perf_counter() - t0, 1),
        # per epoch, so that a stretch of shared CPU can be told from the run's own cost
        "epoch_seconds": epoch_seconds(epochs),
        "curve": curve(epochs),
        "epochs_run": len(epochs),
        "best_epoch": best.get("epoch"),
        "events": events,
        "hit_cap": len(epochs) >= settings["train.epochs"]
        and not any(e["event"] == "early stop" for e in events),
        "phases": phases(epochs),
        **scores,
    }
    if before is not None:  # what it had when the first cap stopped it
        keep = ("epochs_run", "best_epoch", "git_commit", "train_seconds", "machine")
        record["extended_from"] = {k: before[k] for k in keep if k in before} | {
            "slice_rsum": before["slice"]["rsum"],
            "dev_rsum": before["dev"]["rsum"],
            # false: its run folder was elsewhere, and it trained again from its start
            # (its train_seconds are then the new run's alone)
            "resumed": meta["config"]["train"]["epochs"] < fair.EXTENDED_CAP,
        }
    record["started"] = families.started(record)
    write_cell(FAIR_CELLS, cell.name, record)
    return record


# ------------------------------------------------------------ the first protocol
def run_cell(cell: Cell | families.Job) -> dict:
    """Train ``cell`` (resuming a killed run), score it, and record it atomically."""
    run = RUNS / cell.name
    t0 = time.perf_counter()
    train_run(run, cell.config, cell.overrides(), ROOT, collapsed_ok=True, pass_fds=held(cell.name))
    state = json.loads((run / "done.json").read_text())
    log = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    log = [e for e in log if "event" not in e]  # epochs only
    # the trainer's own clock runs on across a resume, which done.json's does not
    seconds = max(state["seconds"], max((e.get("seconds", 0) for e in log), default=0))
    best = json.loads((run / "best.json").read_text()) if (run / "best.json").is_file() else {}
    if isinstance(cell, Cell):
        what = {"row": cell.row, "recipe": cell.recipe}
    else:
        what = {"family": cell.family, "variant": cell.variant}
    record = {
        "cell": cell.name,
        **what,
        "seed": cell.seed,
        "config": cell.config,
        "overrides": cell.overrides(),
        "date": dt.date.today().isoformat(),
        "git_commit": git_commit(),
        "machine": machine(),
        "train_seconds": round(seconds, 1),
        "collapsed_flag": bool(state.get("collapsed")),  # below rsum 10 on the slice at epoch 5
        "wall_seconds": round(time.perf_counter() - t0, 1),
        "epochs_run": len(log),
        "best_epoch": best.get("epoch"),
    }
    # epochs run under each loss (a curriculum run must show both)
    record["phases"] = phases(log)
    if isinstance(cell, Cell):
        record |= score_table2(run, STORE)
        record["started"] = families.started(record)  # dev rsum at the slice's epoch
    else:
        record |= scoring.score(cell, run)
    write_cell(CELLS, cell.name, record)
    return record


def add_lengths(done: dict[str, dict]) -> None:
    """Re-score the runs of recorded cells of FC7-SOE and the report's encoders that
    predate recall by caption length, check that their recorded dev metrics come out
    unchanged, and add ``dev.by_length``."""
    for name, c in done.items():
        if c.get("row") not in (REG_BASE, *REG_TEXT) or "by_length" in c["dev"]:
            continue
        run = RUNS / name
        if not (run / "done.json").is_file():
            print(f"{name}: its run is not on this machine; left as recorded")
            continue
        new = score_table2(run, STORE)["dev"]
        drift = {k: (v, new[k]) for k, v in c["dev"].items() if abs(new[k] - v) > 0.01}
        if drift:
            raise SystemExit(f"{name}: re-scored dev metrics differ from the record: {drift}")
        c["dev"]["by_length"] = new["by_length"]
        c["rescored"] = {"date": dt.date.today().isoformat(), "added": ["dev.by_length"]}
        write_cell(CELLS, name, c)
        print(f"{name}: recall by caption length added (dev metrics re-scored unchanged)")


def add_order_stats(done: dict[str, dict]) -> None:
    """Add ``order_stats`` (see :func:`scoring.order_stats`) to the recorded
    instability cells (MOE, POE) that lack it (those recorded before the runner scored
    it), from their runs' last checkpoints."""
    for name, c in done.items():
        if c.get("family") not in ("moe", "poe") or "order_stats" in c:
            continue
        run = RUNS / name
        if not (run / "done.json").is_file():
            print(f"{name}: its run is not on this machine; left as recorded")
            continue
        c["order_stats"] = scoring.order_stats(run)
        c.setdefault("added", []).append(
            {"date": dt.date.today().isoformat(), "field": "order_stats"})  # fmt: skip
        write_cell(CELLS, name, c)
        print(f"{name}: order_stats added")


def add_epoch_seconds(done: dict[str, dict]) -> None:
    """Add ``epoch_seconds`` to the recorded fair cells that lack it (those recorded
    before the runner kept it), from their runs, where the run is on this machine and
    its epochs are the ones recorded."""
    for name, c in done.items():
        if "epoch_seconds" in c:
            continue
        run = RUNS / name
        if not (run / "done.json").is_file():
            print(f"{name}: its run is not on this machine; left as recorded")
            continue
        per_epoch = epoch_seconds(run_log(run)[0])
        if len(per_epoch) != c["epochs_run"]:
            print(f"{name}: its run has {len(per_epoch)} epochs, the record "
                  f"{c['epochs_run']}; left as recorded")  # fmt: skip
            continue
        c["epoch_seconds"] = per_epoch
        c.setdefault("added", []).append(
            {"date": dt.date.today().isoformat(), "field": "epoch_seconds"})  # fmt: skip
        write_cell(FAIR_CELLS, name, c)
        print(f"{name}: epoch_seconds added")


def add_curves(done: dict[str, dict], previous: Path) -> None:
    """Add ``curve`` to the recorded fair cells that lack it (those recorded before the
    runner kept it): from the run, where it is on this machine and its epochs are the ones
    recorded; else from ``previous`` (``moe_start.json`` as committed, which holds the L_M
    epochs of each MOE cell's log, loss to 4 decimals and slice rsum to 1), where those
    are all the cell's epochs."""
    kept = {r["cell"]: r for r in json.loads(previous.read_text())["runs"] if "curve" in r}
    for name, c in done.items():
        if "curve" in c:
            continue
        run = RUNS / name
        epochs = run_log(run)[0] if (run / "done.json").is_file() else []
        if epochs and len(epochs) == c["epochs_run"]:
            c["curve"], source = curve(epochs), "its run folder"
        elif (
            name in kept
            and len(kept[name]["curve"]) == c["epochs_run"]
            and kept[name]["slice_rsum"] == c["slice"]["rsum"]  # not a run recorded since
        ):
            rows = kept[name]["curve"]
            c["curve"] = {"epoch": [r[0] for r in rows], "phase": ["max"] * len(rows),
                          "loss": [r[1] for r in rows], "rsum": [r[2] for r in rows]}  # fmt: skip
            source = f"{previous.name} (loss to 4 decimals, slice rsum to 1)"
        else:
            print(f"{name}: no log of its epochs here; left as recorded")
            continue
        c.setdefault("added", []).append(
            {"date": dt.date.today().isoformat(), "field": "curve", "from": source})  # fmt: skip
        write_cell(FAIR_CELLS, name, c)
        print(f"{name}: curve added from {source}")


# ------------------------------------------------------------ the loop
def run_grid(
    pending, run_one, folder: Path, max_cells: int = 0, only: str = "", stop_after: float = 0
) -> None:
    """Run ``pending(done)``'s cells one at a time until none is left, ``max_cells`` have
    run, or ``stop_after`` minutes have passed (no cell starts after that): each taken
    under its lock, each failure reported and skipped. ``only``: comma-separated name
    prefixes, a cell matching any of them."""
    n, failed, t0 = 0, set(), time.monotonic()
    prefixes = tuple(x.strip() for x in only.split(",") if x.strip()) or ("",)
    while not (max_cells and n >= max_cells):
        if stop_after and time.monotonic() - t0 > 60 * stop_after:
            print(f"{dt.datetime.now():%Y-%m-%d %H:%M} {stop_after:g} min passed", flush=True)
            break
        todo = [c for c in pending(load_cells(folder)) if c.name.startswith(prefixes)]
        cell = next((c for c in todo if c.name not in failed and claim(c.name)), None)
        if cell is None:
            break
        try:
            if cell.name not in {c.name for c in pending(load_cells(folder))}:
                continue  # another runner recorded it between the listing and the lock
            print(f"{dt.datetime.now():%Y-%m-%d %H:%M} {cell.name}: training", flush=True)
            rec = run_one(cell)
        except (subprocess.CalledProcessError, OSError, ValueError, KeyError) as e:
            # nothing is recorded for it; this runner goes on with the next cell
            print(f"{cell.name}: failed ({type(e).__name__}: {e}); not recorded", flush=True)
            failed.add(cell.name)
            continue
        finally:
            release(cell.name)
        n += 1
        k = families.main_metric(rec)
        print(f"{dt.datetime.now():%Y-%m-%d %H:%M} {rec['cell']}: slice {k} {rec['slice'][k]} "
              f"dev {k} {rec['dev'][k]}, {rec.get('epochs_run')} epochs "
              f"({rec['wall_seconds']:.0f} s)", flush=True)  # fmt: skip


def run_fair(max_cells: int = 0, only: str = "", stop_after: float = 0) -> None:
    """The fair grid's missing cells (``fair.pending``). Its cells train in bf16 autocast
    (``fair._fixed``); on a CPU without bf16 arithmetic their GEMMs run in fp32 kernels
    on the same bf16 values (``vsekit.lab.train.bf16``), which each cell records."""
    ensure_fair_store()
    run_grid(fair.pending, run_fair_cell, FAIR_CELLS, max_cells, only, stop_after)


def bf16_gemms(settings: dict[str, object], epochs: list[dict] | None = None) -> str:
    """The kernels a run's bf16 GEMMs ran in: ``fp32`` (``vsekit.lab.train.bf16``, on a
    CPU that would emulate bf16), ``native``, or ``mixed`` (a run resumed on another
    kind of machine). Each epoch's log names them (``gemm_kernels``); for epochs logged
    before it did (or no epochs), this machine's answer for ``settings`` (``vse train
    --set`` keys) stands in, even for a capped run's first part trained elsewhere."""
    logged = {e["gemm_kernels"] for e in epochs or () if "gemm_kernels" in e}
    if not epochs or any("gemm_kernels" not in e for e in epochs):
        logged.add(this_machine_gemms(settings))
    return logged.pop() if len(logged) == 1 else "mixed"


def this_machine_gemms(settings: dict[str, object]) -> str:
    """:func:`vsekit.lab.train.bf16.gemm_kernels` for ``settings`` on this machine, on the
    device the Trainer would pick (:func:`vsekit.lab.train.trainer.train_device`)."""
    from vsekit.lab.train.bf16 import gemm_kernels
    from vsekit.lab.train.trainer import train_device
    from vsekit.runtime.precision import cpu_info

    device = train_device(settings.get("train.device"))  # type: ignore[arg-type]
    return gemm_kernels(str(settings.get("train.precision", "fp32")), device, cpu_info())


def run_first(max_cells: int = 0, only: str = "") -> None:
    """The first protocol's missing cells (``protocol.pending``)."""
    from . import protocol

    run_grid(protocol.pending, run_cell, CELLS, max_cells, only)
