"""Pretrained CNN backbones that expose their intermediate activations.

Every backbone is a :class:`Backbone`: an ``nn.Module`` that declares

* ``layers``: the ordered layers the Full-Network Embedding reads (name, channels);
* ``baseline_layer``: the one-layer baseline (VGG: fc7; ResNet/EfficientNet: the pooled
  penultimate layer), which must be one of ``layers``;
* its preprocessing: ``input_size`` and ``mean``/``std`` on the 0-1 RGB scale;

and implements ``iter_layers(x)``, a generator yielding one tensor per declared layer, in
order (``[B, C, H, W]`` for convolutional layers, ``[B, C]`` for fully connected ones),
and ``classify(x)`` (ImageNet logits, for ``vse weights check``). From these the base
class gives ``forward_intermediates(x)`` (the list) and ``forward_pooled(x)``, which pools
each map as soon as it is produced so that a batch of 10-crop views stays small in memory,
and can keep the last convolutional map (``last_map_layer``) for R-MAC.

Backbones are created by name: ``create_backbone("resnet50", weights="auto")``. A new
backbone is one ``@register_backbone`` function.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import nn

from vsekit.registry import Registry

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class LayerSpec:
    name: str
    channels: int
    kind: str = "conv"  # "conv" (spatially average-pooled) or "fc"


class Backbone(nn.Module):
    """Base class; subclasses fill ``layers`` and implement the forward methods."""

    name: str = ""
    layers: tuple[LayerSpec, ...] = ()
    baseline_layer: str = ""
    last_map_layer: str = ""
    input_size: int = 224
    weights_source: str = "random"  # the weights file loaded (set by create_backbone)
    weights_sha256: str | None = None  # its sha256; None for random weights

    def __init__(self) -> None:
        super().__init__()
        self.set_preprocessing(IMAGENET_MEAN, IMAGENET_STD)

    def set_preprocessing(self, mean, std) -> None:
        """``x = (rgb01 - mean) / std``; weights that expect other input (Caffe-style
        BGR 0-255) fold that into their first convolution and state mean/std here."""
        self.register_buffer("mean", torch.tensor(mean).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std).view(1, 3, 1, 1), persistent=False)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: ``[B, 3, H, W]`` uint8 (0-255) or float (0-1) RGB."""
        if x.dtype == torch.uint8:
            x = x.float().div_(255)
        return (x - self.mean) / self.std

    def preprocessing(self, crops: int) -> dict:
        """What turns a photo into this backbone's input: RGB scaled to 0-1, normalised
        by ``mean``/``std`` (Caffe-style BGR 0-255 weights fold theirs into these), square
        views of ``input_size`` (see :mod:`vsekit.lab.features.crops`), ``crops`` per image."""
        return {
            "mean": [round(v, 8) for v in self.mean.flatten().tolist()],
            "std": [round(v, 8) for v in self.std.flatten().tolist()],
            "input_size": self.input_size,
            "crops": crops,
        }

    def identity(self, crops: int) -> dict:
        """``{"backbone", "weights_sha256", "preprocessing"}``: what a FeatureStore, a run,
        a model bundle and an index record about the image side."""
        return {
            "backbone": self.name,
            "weights_sha256": self.weights_sha256,
            "preprocessing": self.preprocessing(crops),
        }

    @property
    def fne_dim(self) -> int:
        return sum(lay.channels for lay in self.layers)

    @property
    def baseline_dim(self) -> int:
        return self.layer(self.baseline_layer).channels

    def layer(self, name: str) -> LayerSpec:
        for lay in self.layers:
            if lay.name == name:
                return lay
        raise KeyError(f"{self.name} has no layer {name!r}")

    def layer_slices(self) -> dict[str, slice]:
        """Column range of each layer in the concatenated pooled vector."""
        out, a = {}, 0
        for lay in self.layers:
            out[lay.name] = slice(a, a + lay.channels)
            a += lay.channels
        return out

    def iter_layers(self, x: torch.Tensor) -> Iterator[torch.Tensor]:
        """Yield each declared layer's output for input ``x`` (uint8 or 0-1 RGB)."""
        raise NotImplementedError

    def forward_intermediates(self, x: torch.Tensor) -> list[torch.Tensor]:
        return list(self.iter_layers(x))

    def classify(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def load_weights(self, state: dict[str, torch.Tensor]) -> None:
        """Load a state dict in the underlying network's own layout."""
        self.net.load_state_dict(state)

    def forward_pooled(
        self, x: torch.Tensor, keep_last_map: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``([B, fne_dim], last_map)``: every declared layer, spatially average-pooled and
        concatenated; ``last_map`` is the ``[B, C, H, W]`` output of ``last_map_layer``
        when ``keep_last_map``, else None."""
        pooled, last = [], None
        for lay, f in zip(self.layers, self.iter_layers(x), strict=True):
            if keep_last_map and lay.name == self.last_map_layer:
                last = f
            pooled.append(f.mean(dim=(2, 3)) if f.ndim == 4 else f)
        return torch.cat(pooled, dim=1), last

    def forward_layer_pooled(self, x: torch.Tensor, name: str) -> torch.Tensor:
        """``[B, C]``: layer ``name`` alone, spatially average-pooled, equal to its columns
        of :meth:`forward_pooled` (``layer_slices()[name]``). The other layers are not
        pooled and the ones after it are not run: an inference graph that needs only the
        baseline layer (pool5) then has no pooling, layout change or dequantisation of
        the other 16 maps (ResNet-50)."""
        for lay, f in zip(self.layers, self.iter_layers(x), strict=False):
            if lay.name == name:
                return f.mean(dim=(2, 3)) if f.ndim == 4 else f
        raise KeyError(f"{self.name} has no layer {name!r}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_pooled(x)[0]


BackboneFactory = Callable[[], Backbone]
BACKBONES: Registry[BackboneFactory] = Registry(
    "backbone",
    modules=tuple(f"vsekit.lab.features.arch_{a}" for a in ("resnet", "vgg", "efficientnet")),
)
register_backbone = BACKBONES.register
list_backbones = BACKBONES.names


def create_backbone(name: str, weights: str | None = "auto", sha256: str | None = None) -> Backbone:
    """A backbone in eval mode.

    Args:
        name: one of :func:`list_backbones`.
        weights: ``"auto"`` (the one installed source, see :mod:`vsekit.lab.features.weights`;
            an error saying what to install if missing), ``"random"`` (no pretrained
            weights, for tests and shapes), or a local weights file (safetensors or a
            PyTorch state dict).
        sha256: the weights file's expected sha256; a different file is a WeightsError.
    """
    model = BACKBONES.get(name)()
    model.name = name
    if weights != "random":
        from vsekit.lab.features.weights import load_backbone_weights

        load_backbone_weights(model, weights, expect_sha256=sha256)
    return model.eval()
