"""Image views for feature extraction (journal paper, section 4.3.3).

* ``1``: resize the shorter side to ``S = size * 256 / 224``, centre crop ``size``.
* ``2``: the same plus its horizontal mirror.
* ``10``: resize to ``S x S``, take the four corners and the centre ``size x size``, and
  mirror each (order: tl, tr, bl, br, centre, then the five mirrored).

Activations are averaged over the views.
"""

from __future__ import annotations

import torch
from PIL import Image
from torchvision.transforms.v2 import functional as TF

CROP_CHOICES = (1, 2, 10)


def resize_size(size: int) -> int:
    return round(size * 256 / 224)


def decode_size(size: int = 224) -> int:
    """The short side an image needs once decoded for views of ``size``: twice the
    resize, so reduced-size JPEG decoding never costs detail the resize would keep."""
    return 2 * resize_size(size)


def crop_views(img: Image.Image, n_crops: int, size: int = 224) -> torch.Tensor:
    """``[n_crops, 3, size, size]`` uint8 views of an RGB image."""
    if n_crops not in CROP_CHOICES:
        raise ValueError(f"crops must be one of {CROP_CHOICES}, got {n_crops}")
    x = TF.pil_to_tensor(img)  # (3, H, W) uint8
    big = resize_size(size)
    if n_crops == 10:
        five = torch.stack(TF.five_crop(TF.resize(x, [big, big], antialias=True), [size, size]))
        return torch.cat([five, five.flip(-1)])
    x = TF.center_crop(TF.resize(x, big, antialias=True), [size, size])
    return torch.stack([x, TF.horizontal_flip(x)]) if n_crops == 2 else x.unsqueeze(0)
