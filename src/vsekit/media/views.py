"""Image views for the CNN (journal paper, section 4.3.3), with PIL and NumPy only, so
the PyTorch and the ONNX Runtime paths crop identically.

* ``1``: resize the shorter side to ``S = size * 256 / 224``, centre crop ``size``.
* ``2``: the same plus its horizontal mirror.
* ``10``: resize to ``S x S``, take the four corners and the centre ``size x size``, and
  mirror each (order: tl, tr, bl, br, centre, then the five mirrored).

Resizing is PIL's antialiased bilinear (torchvision's ``resize(antialias=True)`` agrees
to within one grey level). Activations are averaged over the views.
"""

from __future__ import annotations

import numpy as np
from PIL import Image

CROP_CHOICES = (1, 2, 10)


def resize_size(size: int) -> int:
    return round(size * 256 / 224)


def decode_size(size: int = 224) -> int:
    """The short side an image needs once decoded for views of ``size``: twice the
    resize, so reduced-size JPEG decoding never costs detail the resize would keep."""
    return 2 * resize_size(size)


def _crop(x: np.ndarray, top: int, left: int, size: int) -> np.ndarray:
    return x[:, top : top + size, left : left + size]


def crop_views_array(img: Image.Image, n_crops: int, size: int = 224) -> np.ndarray:
    """``[n_crops, 3, size, size]`` uint8 views of an RGB image."""
    if n_crops not in CROP_CHOICES:
        raise ValueError(f"crops must be one of {CROP_CHOICES}, got {n_crops}")
    big = resize_size(size)
    if n_crops == 10:
        x = np.asarray(img.resize((big, big), Image.BILINEAR)).transpose(2, 0, 1)
        c = int(round((big - size) / 2.0))
        corners = [(0, 0), (0, big - size), (big - size, 0), (big - size, big - size), (c, c)]
        five = np.stack([_crop(x, t, left, size) for t, left in corners])
        return np.ascontiguousarray(np.concatenate([five, five[..., ::-1]]))
    w, h = img.size
    nw, nh = (big, int(big * h / w)) if w <= h else (int(big * w / h), big)
    x = np.asarray(img.resize((nw, nh), Image.BILINEAR)).transpose(2, 0, 1)
    x = _crop(x, int(round((nh - size) / 2.0)), int(round((nw - size) / 2.0)), size)
    out = np.stack([x, x[..., ::-1]]) if n_crops == 2 else x[None]
    return np.ascontiguousarray(out)
