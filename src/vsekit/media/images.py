"""Reading images the same way everywhere, safely: EXIF orientation applied, first frame
of an animation, RGB. Failures raise :class:`ImageError` with the file and the reason.

Decompression bombs (a few KB of PNG that decode to gigabytes) are refused from the
header, before any pixel is decoded: an image may hold at most :data:`MAX_PIXELS` pixels
once decoded (``VSEKIT_MAX_PIXELS`` overrides it). JPEGs are decoded at a reduced size
(DCT scaling, ``draft``) when the caller needs no more than ``reduce_to`` pixels on the
short side, so a 100-megapixel JPEG costs a few megapixels. At most
:data:`DECODE_SLOTS` images are decoded at once per process, so memory is bounded by
``DECODE_SLOTS x MAX_PIXELS x 4`` bytes whatever the number of concurrent callers.
The check is done here, per call, and is thread-safe (no global warning filters).
"""

from __future__ import annotations

import os
import stat
import threading
from typing import BinaryIO

from PIL import Image, ImageOps, UnidentifiedImageError

from vsekit.fsio import open_no_wait

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff")
HEIC_SUFFIXES = (".heic", ".heif")
#: camera RAW files: read through their embedded JPEG preview (or demosaiced at half
#: size when they have none), with the [raw] extra (rawpy, LibRaw)
RAW_SUFFIXES = (".dng", ".cr2", ".cr3", ".nef", ".arw", ".raf", ".orf", ".rw2", ".pef",
                ".srw")  # fmt: skip
try:  # HEIC/HEIF photos (iPhones), with the [heic] extra
    from pillow_heif import register_heif_opener

    register_heif_opener()
    IMAGE_SUFFIXES += HEIC_SUFFIXES
except ImportError:
    pass
try:
    import rawpy  # noqa: F401

    IMAGE_SUFFIXES += RAW_SUFFIXES
except ImportError:
    pass

#: suffixes this installation cannot read, and the extra that would read them
UNREADABLE = {
    **({} if ".heic" in IMAGE_SUFFIXES else dict.fromkeys(HEIC_SUFFIXES, "heic")),
    **({} if ".dng" in IMAGE_SUFFIXES else dict.fromkeys(RAW_SUFFIXES, "raw")),
}
MAX_PIXELS = int(os.environ.get("VSEKIT_MAX_PIXELS", 50_000_000))  # decoded, per image
DECODE_SLOTS = 2
_slots = threading.BoundedSemaphore(DECODE_SLOTS)
# PIL's own bomb check (a warning between 1x and 2x its limit, an error above) is
# replaced by the explicit budget below, which is checked on every open.
Image.MAX_IMAGE_PIXELS = None


class ImageError(ValueError):
    """An image could not be read; ``str(e)`` is ``"<path>: <reason>"``."""


class ImageTooLarge(ImageError):
    """An image over the pixel budget (a decompression bomb or a huge scan)."""


def _name(src) -> str:
    return str(src) if isinstance(src, str | os.PathLike) else getattr(src, "name", "upload")


def open_regular(path: str | os.PathLike) -> BinaryIO:
    """``path`` opened for reading only if it is a regular file: a FIFO, a device or a
    folder is an :class:`ImageError` at once (never a read that blocks forever). The
    check is made on the open file, so a path swapped after it cannot slip through."""
    name = os.fsdecode(path)
    try:
        fd, st = open_no_wait(path)
    except FileNotFoundError as e:
        raise ImageError(f"{name}: no such file") from e
    except OSError as e:
        raise ImageError(f"{name}: cannot be opened ({e.strerror})") from e
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else "a FIFO, socket or device"
        raise ImageError(f"{name}: not a regular file ({kind})")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def load_image(src: str | os.PathLike | BinaryIO, reduce_to: int | None = None) -> Image.Image:
    """Decode ``src`` (a path or a binary file object) into an RGB image.

    ``reduce_to``: the caller needs at least this many pixels on the short side and no
    more; JPEGs are then decoded at the smallest DCT scale that keeps it, other formats
    are box-reduced by a whole factor before leaving the decode slot (the result is never
    smaller than ``reduce_to`` on its short side, nor larger than twice that).
    Raises :class:`ImageTooLarge` over the pixel budget and :class:`ImageError` for
    anything unreadable.
    """
    name = _name(src)
    if isinstance(src, (str, os.PathLike)):
        with open_regular(src) as fh:
            if os.fspath(src).lower().endswith(RAW_SUFFIXES):
                return _decode(raw_preview(fh, name), name, reduce_to)
            return _decode(fh, name, reduce_to)
    return _decode(src, name, reduce_to)


def raw_preview(fh: BinaryIO, name: str) -> BinaryIO:
    """A camera RAW file as an image file: its embedded JPEG preview, or (without one)
    the sensor data demosaiced at half size into a PNG. ImageError if rawpy cannot read
    it; the result is decoded under the same pixel budget as any image."""
    import io

    try:
        import rawpy
    except ImportError as e:
        raise ImageError(f"{name}: a camera RAW file; install vsekit[raw] to read it") from e
    try:
        with rawpy.imread(fh) as raw:
            try:
                thumb = raw.extract_thumb()
            except (rawpy.LibRawNoThumbnailError, rawpy.LibRawUnsupportedThumbnailError):
                thumb = None
            if thumb is not None and thumb.format == rawpy.ThumbFormat.JPEG:
                return io.BytesIO(bytes(thumb.data))
            h, w = raw.sizes.height // 2, raw.sizes.width // 2  # from the header
            if h * w > MAX_PIXELS:  # refused before any demosaicing
                raise ImageTooLarge(f"{name}: {w}x{h} pixels at half size, over the budget")
            rgb = raw.postprocess(half_size=True, use_camera_wb=True)
    except (rawpy.LibRawError, OSError, ValueError) as e:
        raise ImageError(f"{name}: unreadable RAW file ({e})") from e
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, "PNG", compress_level=0)
    buf.seek(0)
    return buf


def _decode(src: BinaryIO, name: str, reduce_to: int | None) -> Image.Image:
    try:
        with _slots, Image.open(src) as im:
            w, h = im.size
            if w * h > MAX_PIXELS:
                if reduce_to and im.format == "JPEG":
                    im.draft("RGB", (reduce_to, reduce_to))
                    w, h = im.size
                if w * h > MAX_PIXELS:
                    raise ImageTooLarge(
                        f"{name}: {im.size[0]}x{im.size[1]} pixels, over the budget of "
                        f"{MAX_PIXELS:,} (a decompression bomb or a huge scan)"
                    )
            elif reduce_to and im.format == "JPEG":
                im.draft("RGB", (reduce_to, reduce_to))
            im.seek(0)
            im.load()  # a full decode: truncated files fail here
            if reduce_to and min(im.size) >= 2 * reduce_to:  # not JPEG: shrink in the slot
                if im.mode not in ("L", "LA", "RGB", "RGBA", "I", "F"):
                    im = im.convert("L" if im.mode == "1" else "RGBA")
                im = im.reduce(min(im.size) // reduce_to)
            im = ImageOps.exif_transpose(im)
            return im.convert("RGB")
    except ImageError:
        raise
    except FileNotFoundError as e:
        raise ImageError(f"{name}: no such file") from e
    except UnidentifiedImageError as e:
        raise ImageError(f"{name}: not an image") from e
    except (OSError, SyntaxError, ValueError, EOFError, Image.DecompressionBombError) as e:
        raise ImageError(f"{name}: unreadable image ({e})") from e
    except MemoryError as e:
        raise ImageTooLarge(f"{name}: too large to decode in memory") from e
