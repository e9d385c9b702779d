"""Reading images the same way everywhere: EXIF orientation applied, first frame of an
animation, RGB. Failures raise :class:`ImageError` with the file and the reason."""

from __future__ import annotations

import warnings
from pathlib import Path

from PIL import Image, ImageOps, UnidentifiedImageError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif")
Image.MAX_IMAGE_PIXELS = 20_000 * 20_000  # refuse decompression bombs beyond 400 MP


class ImageError(ValueError):
    """An image could not be read; ``str(e)`` is ``"<path>: <reason>"``."""


def load_image(path: str | Path) -> Image.Image:
    """Decode ``path`` fully into an RGB image (raises :class:`ImageError`)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as im:
                im.seek(0)
                im = ImageOps.exif_transpose(im)
                return im.convert("RGB")  # forces a full decode: truncated files fail here
    except FileNotFoundError as e:
        raise ImageError(f"{path}: no such file") from e
    except UnidentifiedImageError as e:
        raise ImageError(f"{path}: not an image") from e
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombWarning) as e:
        raise ImageError(f"{path}: unreadable image ({e})") from e
