"""VGG16/19 (torchvision architecture) with the journal paper's FNE layer set: every
convolutional layer after its ReLU, then fc6 and fc7 after their ReLU. VGG16 gives
13 convs (4,224) + 4,096 + 4,096 = 12,416 features; the baseline is fc7 (4,096).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn
from torchvision.models import vgg16, vgg19

from vsekit.lab.features.backbones import Backbone, LayerSpec, register_backbone

_BLOCK_NAMES = "12345"


class VGGBackbone(Backbone):
    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net
        layers, self._taps = [], []
        block, conv = 1, 0
        for i, m in enumerate(net.features):
            if isinstance(m, nn.Conv2d):
                conv += 1
                channels = m.out_channels
            elif isinstance(m, nn.ReLU):
                layers.append(LayerSpec(f"conv{block}_{conv}", channels))
                self._taps.append(i)
            elif isinstance(m, nn.MaxPool2d):
                block, conv = block + 1, 0
        layers += [LayerSpec("fc6", 4096, "fc"), LayerSpec("fc7", 4096, "fc")]
        self.layers = tuple(layers)
        self.baseline_layer = "fc7"
        self.last_map_layer = layers[-3].name  # conv5_3 (VGG16) / conv5_4 (VGG19)

    def iter_layers(self, x: torch.Tensor) -> Iterator[torch.Tensor]:
        taps = set(self._taps)
        x = self.normalize(x)
        for i, m in enumerate(self.net.features):
            x = m(x)
            if i in taps:
                yield x
        c = self.net.classifier
        x = torch.flatten(self.net.avgpool(x), 1)
        fc6 = c[1](c[0](x))
        yield fc6
        yield c[4](c[3](fc6))

    def classify(self, x: torch.Tensor) -> torch.Tensor:
        x = self.net.features(self.normalize(x))
        return self.net.classifier(torch.flatten(self.net.avgpool(x), 1))


@register_backbone("vgg16")
def _vgg16() -> Backbone:
    return VGGBackbone(vgg16(weights=None))


@register_backbone("vgg19")
def _vgg19() -> Backbone:
    return VGGBackbone(vgg19(weights=None))
