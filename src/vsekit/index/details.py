"""What a viewer shows about one indexed photo: when, with what camera, where, how big.

The date, camera and place come from the index (the ``photo_meta`` table, read into the
snapshot at index time: no EXIF is parsed again); the size in bytes from the file's
recorded stamp; the size in pixels from the file's header (no decoding), as displayed,
so a portrait photo stored sideways with an EXIF rotation reads as portrait.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import BinaryIO

from vsekit.index.snapshot import Snapshot

#: EXIF orientations that turn the stored pixels by 90 degrees
_SIDEWAYS = {5, 6, 7, 8}
_ORIENTATION = 0x0112


def pixel_size(fh: BinaryIO) -> tuple[int, int] | None:
    """``(width, height)`` of an image file as shown (EXIF rotation applied), read from
    its header; None when it is not an image Pillow can open (a video)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(fh) as im:
            w, h = im.size
            try:
                turned = im.getexif().get(_ORIENTATION) in _SIDEWAYS
            except Exception:  # noqa: BLE001  (malformed EXIF costs only the rotation)
                turned = False
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError):
        return None
    return (h, w) if turned else (w, h)


def map_link(lat: float, lon: float) -> str:
    """An OpenStreetMap link centred on the place (opened by the user, never fetched)."""
    return (
        f"https://www.openstreetmap.org/?mlat={lat:.6f}&mlon={lon:.6f}#map=15/{lat:.5f}/{lon:.5f}"
    )


def photo_details(snap: Snapshot, file_id: int, pixels: tuple[int, int] | None = None) -> dict:
    """The viewer's facts about ``file_id`` (KeyError if the snapshot has no such file):
    ``taken`` (ISO date and time) and ``taken_from`` (``exif``, or ``mtime`` when the photo
    has no date), ``camera`` (make and model), ``lat``/``lon`` and a ``map`` link (None
    without GPS), ``bytes``, and ``width``/``height`` when ``pixels`` is given."""
    pos = snap.id_to_pos[int(file_id)]
    m = {f: (snap.photo_meta.get(f) or [None] * len(snap))[pos]
         for f in ("taken", "taken_from", "make", "model", "lat", "lon")}  # fmt: skip
    make, model = m["make"] or "", m["model"] or ""
    # "Canon Canon EOS 5D" reads as "Canon EOS 5D": makers often repeat their name
    camera = model if make and model.lower().startswith(make.lower()) else f"{make} {model}"
    lat, lon = m["lat"], m["lon"]
    placed = lat is not None and lon is not None and math.isfinite(lat) and math.isfinite(lon)
    size, _ = snap.stamps[pos]
    return {
        "id": int(file_id),
        "name": Path(snap.paths[pos]).name,
        "taken": m["taken"],
        "taken_from": m["taken_from"],
        "camera": camera.strip() or None,
        "lat": float(lat) if placed else None,
        "lon": float(lon) if placed else None,
        "map": map_link(lat, lon) if placed else None,
        "bytes": int(size),
        "width": pixels[0] if pixels else None,
        "height": pixels[1] if pixels else None,
    }
