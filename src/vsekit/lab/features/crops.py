"""Image views as tensors for the PyTorch path (see :mod:`vsekit.media.views`, which both the
PyTorch and the ONNX Runtime paths use)."""

from __future__ import annotations

import torch
from PIL import Image

from vsekit.media.views import CROP_CHOICES, crop_views_array, decode_size, resize_size

__all__ = ["CROP_CHOICES", "crop_views", "decode_size", "resize_size"]


def crop_views(img: Image.Image, n_crops: int, size: int = 224) -> torch.Tensor:
    """``[n_crops, 3, size, size]`` uint8 views of an RGB image."""
    return torch.from_numpy(crop_views_array(img, n_crops, size))
