"""Backbone weight files: reading, writing and identifying them.

A weight file is identified by the sha256 of its canonical content
(:func:`content_sha256`). Stores, runs, model bundles and
indexes record it, so a model never runs on other weights than those it was trained on.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from vsekit.fsio import atomic_write

_SHA_CACHE: dict[tuple[str, int, int], str] = {}


class WeightsError(RuntimeError):
    """Weights are missing, do not fit, or are not the ones recorded; the message says
    what to install or pass."""


def content_sha256(state: dict[str, torch.Tensor], meta: dict[str, str]) -> str:
    """sha256 of weights in canonical form: every tensor by sorted name (name, dtype,
    shape, raw bytes), then the metadata as sorted JSON. Unlike the file's own bytes it
    does not depend on the container (safetensors writes its metadata in arbitrary
    order, so converting the same weights twice gives different files)."""
    h = hashlib.sha256()
    for k in sorted(state):
        t = state[k].detach().cpu().contiguous()
        h.update(f"{k}|{t.dtype}|{tuple(t.shape)}\n".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    h.update(json.dumps(meta, sort_keys=True).encode())
    return h.hexdigest()


def file_sha256(path: str | os.PathLike) -> str:
    """:func:`content_sha256` of a weights file (memoised per path, size and mtime)."""
    st = os.stat(path)
    key = (str(Path(path).resolve()), st.st_size, st.st_mtime_ns)
    if key not in _SHA_CACHE:
        _SHA_CACHE[key] = content_sha256(*read_weights(Path(path)))
    return _SHA_CACHE[key]


def save_weights(path: Path, state: dict[str, torch.Tensor], meta: dict[str, str]) -> None:
    """Write a safetensors weights file atomically."""
    state = {k: v.contiguous() for k, v in state.items()}
    atomic_write(path, lambda tmp: save_file(state, str(tmp), metadata=meta))


def read_weights(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """State dict and metadata of a safetensors or PyTorch weights file."""
    if not path.is_file():
        raise WeightsError(f"{path}: no such weights file")
    if path.suffix == ".safetensors":
        with safe_open(str(path), framework="pt") as f:
            return {k: f.get_tensor(k) for k in f.keys()}, dict(f.metadata() or {})  # noqa: SIM118
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means a bad file
        raise WeightsError(f"{path}: not a PyTorch state dict ({e})") from e
    if isinstance(state, dict) and "state_dict" in state:
        state = state["state_dict"]
    return state, {}
