"""What the model's image side accepts: a path or a PIL image, or a sequence of them."""

from __future__ import annotations

import os

from PIL import Image

ImageInput = str | os.PathLike | Image.Image


def as_image_list(images) -> tuple[list, bool]:
    """``(items, single)``: one path or PIL image becomes a list of one."""
    single = isinstance(images, str | os.PathLike | Image.Image)
    return ([images] if single else list(images)), single
