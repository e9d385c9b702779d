"""ResNet-50/152 (torchvision architecture) with the FNE layer set: the stem (after its
ReLU) and every bottleneck block output. The last block's pooled output is pool5, the
one-layer baseline (2,048-d). ResNet-50: 64 + 16 blocks = 15,168 features.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn
from torchvision.models import resnet50, resnet152

from vsekit.lab.features.backbones import Backbone, LayerSpec, register_backbone


class ResNetBackbone(Backbone):
    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net
        layers = [LayerSpec("stem", 64)]
        for s in range(1, 5):
            for j, block in enumerate(getattr(net, f"layer{s}")):
                layers.append(LayerSpec(f"layer{s}.{j}", block.conv3.out_channels))
        self.layers = tuple(layers)
        self.baseline_layer = layers[-1].name
        self.last_map_layer = layers[-1].name

    def use_stride_in_1x1(self) -> None:
        """The original (Caffe / Keras v1) ResNet: a downsampling block strides in its
        first 1x1 convolution, not in the 3x3 as torchvision's v1.5 does."""
        for s in (2, 3, 4):
            block = getattr(self.net, f"layer{s}")[0]
            block.conv1.stride, block.conv2.stride = (2, 2), (1, 1)

    def set_bn_eps(self, eps: float) -> None:
        for m in self.net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.eps = eps

    def _blocks(self):
        for s in range(1, 5):
            yield from getattr(self.net, f"layer{s}")

    def iter_layers(self, x: torch.Tensor) -> Iterator[torch.Tensor]:
        n = self.net
        x = n.relu(n.bn1(n.conv1(self.normalize(x))))
        yield x
        x = n.maxpool(x)
        for block in self._blocks():
            x = block(x)
            yield x

    def classify(self, x: torch.Tensor) -> torch.Tensor:
        pool5 = self.forward_pooled(x)[0][:, self.layer_slices()[self.baseline_layer]]
        return self.net.fc(pool5)


@register_backbone("resnet50")
def _resnet50() -> Backbone:
    return ResNetBackbone(resnet50(weights=None))


@register_backbone("resnet152")
def _resnet152() -> Backbone:
    return ResNetBackbone(resnet152(weights=None))
