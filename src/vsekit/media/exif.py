"""What a photo says about itself: capture time, camera and place, from its EXIF header
(Pillow reads only the header, not the pixels).

``taken`` is local wall-clock time as ISO text (``2019-06-15T10:04:31``), the way EXIF
records it; files without an EXIF date (and videos) fall back to their modification
time, marked ``taken_from="mtime"``. ISO text sorts as time does, so date filters compare
strings.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import stat
from dataclasses import dataclass

from PIL import Image

from vsekit.fsio import open_no_wait, stored_ns

EXIF_IFD, GPS_IFD = 0x8769, 0x8825
DATETIME_ORIGINAL, DATETIME_DIGITIZED, DATETIME = 36867, 36868, 306
MAKE, MODEL = 271, 272


@dataclass(frozen=True)
class PhotoMeta:
    taken: str | None
    taken_from: str  # "exif" | "mtime"
    make: str | None = None
    model: str | None = None
    lat: float | None = None
    lon: float | None = None
    sha256: str | None = None  # of the file's bytes: exact duplicates share it


def _text(v) -> str | None:
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    if not isinstance(v, str):
        return None
    v = v.encode("utf-8", "replace").decode("utf-8")  # lone surrogates cannot be stored
    v = v.strip("\0 ").strip()
    return v or None


def _exif_time(v) -> str | None:
    """``"2019:06:15 10:04:31"`` -> ``"2019-06-15T10:04:31"`` (None if malformed)."""
    v = _text(v)
    if not v:
        return None
    try:
        return dt.datetime.strptime(v[:19], "%Y:%m:%d %H:%M:%S").isoformat()
    except ValueError:
        return None


def _degrees(v, ref) -> float | None:
    try:
        d, m, s = (float(x) for x in v)
    except (TypeError, ValueError, ZeroDivisionError):
        return None
    out = d + m / 60 + s / 3600
    if _text(ref) in ("S", "W"):
        out = -out
    return out


def mtime_text(mtime_ns: int) -> str | None:
    """A modification time as local ISO text; None where it is not a date (past year
    9999)."""
    try:
        return dt.datetime.fromtimestamp(mtime_ns / 1e9).replace(microsecond=0).isoformat()
    except (OverflowError, ValueError, OSError):
        return None


def read_meta(path: str | os.PathLike, mtime_ns: int) -> PhotoMeta:
    """The photo's EXIF date, camera and GPS position, and its content's sha256; the
    file's modification time as its date when it has none (or cannot be read as an
    image: a video, say). ``mtime_ns``: the time the index recorded for the file (as
    :func:`vsekit.fsio.stored_ns` gives it); when the file's own time is no longer that
    (it changed since it was scanned), no sha256 is recorded, so that a content hash
    never stands for content other than the embedded one."""
    try:  # never a blocking open: a FIFO swapped in for a photo is not read
        fd, st = open_no_wait(path)
    except OSError:
        return PhotoMeta(mtime_text(mtime_ns), "mtime")
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return PhotoMeta(mtime_text(st.st_mtime_ns), "mtime")
    os.set_blocking(fd, True)
    same = stored_ns(st.st_mtime_ns) == mtime_ns
    with os.fdopen(fd, "rb") as fh:
        try:
            sha = hashlib.file_digest(fh, "sha256").hexdigest() if same else None
            fh.seek(0)
            with Image.open(fh) as im:
                return _from_exif(im.getexif(), st.st_mtime_ns, sha)
        # a malformed header of any kind (Pillow's parser raises struct.error, TypeError,
        # IndexError, ... besides OSError) costs the file its EXIF fields, nothing more
        except Exception:  # noqa: BLE001
            sha = locals().get("sha")
            return PhotoMeta(mtime_text(st.st_mtime_ns), "mtime", sha256=sha)


def _from_exif(exif, mtime_ns: int, sha: str | None) -> PhotoMeta:
    sub = exif.get_ifd(EXIF_IFD)
    gps = exif.get_ifd(GPS_IFD)
    taken = next((t for t in (_exif_time(sub.get(DATETIME_ORIGINAL)),
                              _exif_time(sub.get(DATETIME_DIGITIZED)),
                              _exif_time(exif.get(DATETIME))) if t), None)  # fmt: skip
    lat = _degrees(gps.get(2), gps.get(1)) if gps else None
    lon = _degrees(gps.get(4), gps.get(3)) if gps else None
    if lat is not None and not (-90 <= lat <= 90):
        lat = None
    if lon is not None and not (-180 <= lon <= 180):
        lon = None
    return PhotoMeta(
        taken or mtime_text(mtime_ns),
        "exif" if taken else "mtime",
        _text(exif.get(MAKE)),
        _text(exif.get(MODEL)),
        lat if lon is not None else None,
        lon if lat is not None else None,
        sha,
    )
