"""A torchvision-layout ResNet (bottleneck blocks: ResNet-50/152) as ONNX nodes, from
its NumPy state dict, BatchNorm folded into the convolutions.

The weights file's ``vsekit.*`` metadata adapts the architecture as the lab's
:class:`~vsekit.lab.features.arch_resnet.ResNetBackbone` does: ``stride_in_1x1`` (the
original Caffe / Keras v1 ResNet strides in a downsampling block's first 1x1
convolution), ``bn_eps``, and the preprocessing ``mean``/``std`` (0-1 RGB).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from vsekit.graphs.builder import Graph
from vsekit.graphs.errors import UnsupportedModel

#: torchvision's defaults, for weights files without ``vsekit.*`` metadata
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
TORCH_BN_EPS = 1e-5
STAGES = ("layer1", "layer2", "layer3", "layer4")


@dataclass(frozen=True)
class ResNetConfig:
    """What the weights file says about the network it belongs to."""

    blocks: tuple[int, ...]  # bottleneck blocks per stage (ResNet-50: 3, 4, 6, 3)
    mean: tuple[float, float, float]  # 0-1 RGB
    std: tuple[float, float, float]
    stride_in_1x1: bool
    bn_eps: float

    @classmethod
    def from_weights(cls, state: dict[str, np.ndarray], meta: dict[str, str]) -> ResNetConfig:
        blocks = []
        for stage in STAGES:
            found = {int(m.group(1)) for k in state
                     if (m := re.fullmatch(rf"{stage}\.(\d+)\.conv1\.weight", k))}  # fmt: skip
            if not found or found != set(range(len(found))):
                raise UnsupportedModel(f"ResNet weights without the blocks of {stage}")
            if f"{stage}.0.conv3.weight" not in state:
                raise UnsupportedModel("ResNet with basic blocks (ResNet-18/34): not supported")
            blocks.append(len(found))
        mean = json.loads(meta["vsekit.mean"]) if "vsekit.mean" in meta else IMAGENET_MEAN
        std = json.loads(meta["vsekit.std"]) if "vsekit.std" in meta else IMAGENET_STD
        return cls(
            blocks=tuple(blocks),
            mean=tuple(float(v) for v in mean),
            std=tuple(float(v) for v in std),
            stride_in_1x1=meta.get("vsekit.stride_in_1x1") == "true",
            bn_eps=float(meta.get("vsekit.bn_eps", TORCH_BN_EPS)),
        )

    def layer_names(self) -> list[str]:
        """The FNE layer names, in order: ``stem``, then ``layer{s}.{j}`` per block."""
        return ["stem"] + [f"{s}.{j}" for s, n in zip(STAGES, self.blocks, strict=True)
                           for j in range(n)]  # fmt: skip


def fold_batchnorm(
    w: np.ndarray, gamma: np.ndarray, beta: np.ndarray, mean: np.ndarray, var: np.ndarray,
    eps: float, bias: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """``BN(conv(x, w) + bias)`` as one convolution: ``(w' [O, I, kh, kw], b' [O])`` with
    ``w' = w * s``, ``b' = beta + (bias - mean) * s``, ``s = gamma / sqrt(var + eps)``
    (computed in float64, stored float32)."""
    s = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)
    b = np.zeros_like(s) if bias is None else bias.astype(np.float64)
    w2 = w.astype(np.float64) * s[:, None, None, None]
    b2 = beta.astype(np.float64) + (b - mean.astype(np.float64)) * s
    return w2.astype(np.float32), b2.astype(np.float32)


class ResNetNodes:
    """Writes the network's nodes into a :class:`Graph`, one FNE layer at a time."""

    def __init__(self, g: Graph, state: dict[str, np.ndarray], cfg: ResNetConfig) -> None:
        self.g, self.state, self.cfg = g, state, cfg

    def conv_bn(self, x: str, conv: str, bn: str, stride: int, relu: bool, name: str) -> str:
        """Convolution ``conv`` (state-dict prefix) with BatchNorm ``bn`` folded in, then
        ReLU when ``relu``; ``name``: the node path (``/layer1.0/conv1``)."""
        st = self.state
        w, b = fold_batchnorm(
            st[f"{conv}.weight"], st[f"{bn}.weight"], st[f"{bn}.bias"], st[f"{bn}.running_mean"],
            st[f"{bn}.running_var"], self.cfg.bn_eps, st.get(f"{conv}.bias"),
        )  # fmt: skip
        kh, kw = w.shape[2:]
        y = self.g.op(
            "Conv", x, self.g.weight(f"{conv}.weight", w), self.g.weight(f"{conv}.bias", b),
            name=f"{name}/Conv", dilations=[1, 1], group=1, kernel_shape=[kh, kw],
            pads=[kh // 2, kw // 2, kh // 2, kw // 2], strides=[stride, stride],
        )  # fmt: skip
        return self.g.op("Relu", y, name=f"{name}/Relu") if relu else y

    def block(self, x: str, stage: int, j: int) -> str:
        """Bottleneck block ``j`` of stage ``stage`` (0-3): 1x1, 3x3, 1x1 convolutions,
        plus the input (through the 1x1 downsampling projection where there is one),
        then ReLU."""
        p = f"{STAGES[stage]}.{j}"
        stride = 2 if stage > 0 and j == 0 else 1
        s1, s2 = (stride, 1) if self.cfg.stride_in_1x1 else (1, stride)
        y = self.conv_bn(x, f"{p}.conv1", f"{p}.bn1", s1, True, f"/{p}/conv1")
        y = self.conv_bn(y, f"{p}.conv2", f"{p}.bn2", s2, True, f"/{p}/conv2")
        y = self.conv_bn(y, f"{p}.conv3", f"{p}.bn3", 1, False, f"/{p}/conv3")
        if f"{p}.downsample.0.weight" in self.state:
            x = self.conv_bn(x, f"{p}.downsample.0", f"{p}.downsample.1", stride, False,
                             f"/{p}/downsample/downsample.0")  # fmt: skip
        y = self.g.op("Add", y, x, name=f"/{p}/Add")
        return self.g.op("Relu", y, name=f"/{p}/relu_2/Relu")

    def layers(self, x: str, until: str | None = None) -> Iterator[tuple[str, str]]:
        """``(layer name, [B, C, H, W] tensor)`` for each FNE layer of the network on the
        normalised input ``x [B, 3, S, S]``: the stem (after its ReLU), then every block's
        output; nodes are written as the iteration goes, and none after ``until``."""
        y = self.conv_bn(x, "conv1", "bn1", 2, True, "/conv1")
        yield "stem", y
        if until == "stem":
            return
        y = self.g.op("MaxPool", y, name="/maxpool/MaxPool", ceil_mode=0, dilations=[1, 1],
                      kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])  # fmt: skip
        for s, n in enumerate(self.cfg.blocks):
            for j in range(n):
                y = self.block(y, s, j)
                name = f"{STAGES[s]}.{j}"
                yield name, y
                if name == until:
                    return


def normalize_pixels(g: Graph, x: str, cfg: ResNetConfig) -> str:
    """``[B, 3, S, S]`` uint8 RGB -> float32 ``(x / 255 - mean) / std`` (as the backbone's
    ``normalize``)."""
    x = g.op("Cast", x, name="/Cast", to=1)
    x = g.op("Div", x, g.const(255.0, name="/pixel_scale"), name="/Div")
    mean = np.asarray(cfg.mean, np.float32).reshape(1, 3, 1, 1)
    std = np.asarray(cfg.std, np.float32).reshape(1, 3, 1, 1)
    x = g.op("Sub", x, g.weight("/mean", mean), name="/Sub")
    return g.op("Div", x, g.weight("/std", std), name="/Div_1")
