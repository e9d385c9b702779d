"""Self-describing, crash-safe checkpoints: safetensors plus JSON, no pickles.

A run directory holds::

    config.json  vocab.json
    epochs/eNNNN/model.safetensors    model weights after epoch NNNN
    epochs/eNNNN/state.safetensors    optimizer tensors and the torch RNG state
    epochs/eNNNN/state.json           epoch, phase, history, optimizer groups, numpy RNG
    last.json  best.json              pointers to an epoch directory (atomically replaced)
    metrics.jsonl  curves.png

An epoch directory is complete before a pointer names it, so a kill at any moment leaves
the previous ``last.json`` valid. Directories no pointer names are pruned.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from vsekit.fsio import atomic_dir, atomic_write


def optimizer_to_flat(opt: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    sd = opt.state_dict()
    tensors, scalars = {}, {}
    for idx, st in sd["state"].items():
        for k, v in st.items():
            if isinstance(v, torch.Tensor):
                tensors[f"opt.{idx}.{k}"] = v.detach().cpu().contiguous()
            else:
                scalars[f"{idx}.{k}"] = v
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars}


def optimizer_from_flat(
    opt: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], info: dict
) -> None:
    state: dict[int, dict[str, Any]] = {}
    for key, v in tensors.items():
        if key.startswith("opt."):
            _, idx, k = key.split(".", 2)
            state.setdefault(int(idx), {})[k] = v
    for key, v in info["scalars"].items():
        idx, k = key.split(".", 1)
        state.setdefault(int(idx), {})[k] = v
    foreach = [g.get("foreach") for g in opt.param_groups]
    opt.load_state_dict({"state": state, "param_groups": info["param_groups"]})
    for g, f in zip(opt.param_groups, foreach, strict=True):
        g["foreach"] = f  # how to update is this optimizer's, not the checkpoint's


def save_epoch(
    run: Path,
    epoch: int,
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    rng: np.random.Generator,
    state: dict,
    best: bool,
) -> Path:
    """Write ``epochs/e{epoch}``, then point ``last.json`` (and ``best.json``) at it."""
    d = run / "epochs" / f"e{epoch:04d}"
    with atomic_dir(d) as tmp:
        save_file(
            {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()},
            str(tmp / "model.safetensors"),
        )
        tensors, opt_info = optimizer_to_flat(opt)
        tensors["rng.torch"] = torch.get_rng_state()
        save_file(tensors, str(tmp / "state.safetensors"))
        full = {
            **state,
            "epoch": epoch,
            "optimizer": opt_info,
            "numpy_rng": rng.bit_generator.state,
        }
        (tmp / "state.json").write_text(json.dumps(full))
    rel = str(d.relative_to(run))
    if best:
        atomic_write(
            run / "best.json",
            json.dumps(
                {"epoch": epoch, "path": rel, "metrics": state.get("metrics", {})}, indent=2
            ),
        )
    atomic_write(run / "last.json", json.dumps({"epoch": epoch, "path": rel}, indent=2))
    _prune(run)
    return d


def _prune(run: Path) -> None:
    keep = set()
    for p in ("last.json", "best.json"):
        f = run / p
        if f.is_file():
            keep.add(json.loads(f.read_text())["path"])
    for d in (run / "epochs").iterdir():
        if str(d.relative_to(run)) not in keep:
            shutil.rmtree(d, ignore_errors=True)


def load_pointer(run: Path, which: str = "best") -> Path:
    f = run / f"{which}.json"
    if not f.is_file():
        raise FileNotFoundError(f"{run}: no {which}.json (is this a training run directory?)")
    return run / json.loads(f.read_text())["path"]


def load_model_weights(model: torch.nn.Module, epoch_dir: Path) -> None:
    model.load_state_dict(load_file(str(epoch_dir / "model.safetensors")))


def load_training_state(
    epoch_dir: Path, model: torch.nn.Module, opt: torch.optim.Optimizer
) -> tuple[dict, np.random.Generator]:
    """Restore model, optimizer and RNGs; returns the saved state dict and numpy RNG."""
    load_model_weights(model, epoch_dir)
    tensors = load_file(str(epoch_dir / "state.safetensors"))
    state = json.loads((epoch_dir / "state.json").read_text())
    optimizer_from_flat(opt, tensors, state.pop("optimizer"))
    torch.set_rng_state(tensors["rng.torch"])
    rng = np.random.default_rng()
    rng.bit_generator.state = state.pop("numpy_rng")
    return state, rng
