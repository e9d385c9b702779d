"""Choosing and loading a model backend: :func:`load_model` and :func:`list_models`.

The core's backend is ONNX Runtime. Other backends plug in from above through the
``vsekit.backends`` entry-point group (the lab registers ``torch``); the core names them
only as strings, so it never imports PyTorch."""

from __future__ import annotations

import os

from vsekit.bundle import DEFAULT_MODEL, ModelError, bundle_dir, onnx_available
from vsekit.runtime.base import BaseModel

BACKENDS = ("auto", "onnx", "torch")


def plugin_backend(name: str):
    """The model class registered under ``name`` in the ``vsekit.backends`` entry points;
    a one-line :class:`ModelError` when it is not installed or its extra is missing."""
    from importlib.metadata import entry_points

    eps = [ep for ep in entry_points(group="vsekit.backends") if ep.name == name]
    if not eps:
        raise ModelError(f"backend {name!r} is not installed (pip install 'vsekit[train]')")
    try:
        return eps[0].load()
    except ImportError as e:
        raise ModelError(
            f"the {name} backend needs PyTorch (pip install 'vsekit[train]'); without it, "
            f"use a bundle with its ONNX files ({e})"
        ) from e


def list_models() -> list[str]:
    """Names :func:`load_model` accepts besides a path: the models shipped in the package."""
    return [DEFAULT_MODEL]


def load_model(
    name_or_path: str | os.PathLike = DEFAULT_MODEL,
    device: str | None = None,
    backend: str | None = None,
    precision: str | None = None,
    image_precision: str | None = None,
) -> BaseModel:
    """A model by name (:func:`list_models`) or a bundle directory.

    ``backend``: ``onnx`` (ONNX Runtime; needs the bundle's ONNX files), ``torch``
    (PyTorch; ``device`` is a torch device, default CUDA when present) or ``auto``:
    ONNX when the bundle has its ONNX files and onnxruntime is installed, else PyTorch.
    ``None`` reads ``$VSEKIT_BACKEND`` (default ``auto``). The model's ``backend``
    attribute says which one runs.

    ``precision`` (ONNX Runtime): ``fp32`` or ``int8`` (the quantised image graph, made
    by ``vse model onnx --int8``); None reads ``$VSEKIT_PRECISION``, else the bundle's
    default. The torch backend is fp32 only: asking it for int8 is an error.
    ``image_precision``: the image graph's alone (what built an index), with the text
    graph chosen for this CPU.
    """
    backend = backend or os.environ.get("VSEKIT_BACKEND", "auto")
    precision = precision or os.environ.get("VSEKIT_PRECISION") or None
    if backend not in BACKENDS:
        raise ValueError(f"backend: use {' | '.join(BACKENDS)}, not {backend!r}")
    path = bundle_dir(name_or_path)
    if backend == "auto":
        backend = "onnx" if onnx_available(path) else "torch"
    if backend == "onnx":
        from vsekit.runtime.onnx_model import OnnxModel

        return OnnxModel.load(path, precision=precision, image_precision=image_precision)
    if "int8" in (precision, image_precision):
        raise ModelError(f"{path}: int8 runs on ONNX Runtime only; use backend='onnx'")
    try:
        cls = plugin_backend(backend)
    except ModelError as e:
        raise ModelError(f"{path}: {e}") from e
    return cls.load(path, device=device)
