"""``GET /photos/{id}``: what the viewer shows about one indexed photo (date, camera,
place, size in pixels and bytes; :mod:`vsekit.index.details`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from vsekit.index.details import photo_details, pixel_size
from vsekit.index.scan import printable
from vsekit.serve.errors import ApiError
from vsekit.serve.state import Service, display_path, service

router = APIRouter()
Svc = Annotated[Service, Depends(service)]


@router.get("/photos/{file_id}")
def photo(svc: Svc, file_id: int) -> dict:
    """An indexed photo's ``taken`` date (``taken_from``: ``exif``, or ``mtime`` for a
    photo without one), ``camera``, ``lat``/``lon`` and a ``map`` link (null without
    GPS), ``width``/``height`` in pixels as shown (null for a video) and ``bytes``."""
    with svc.lock:
        snap = svc.coll.snapshot
    if int(file_id) not in snap.id_to_pos:
        raise ApiError(404, f"id: no indexed file {file_id}")
    with svc.open_indexed(file_id) as fh:  # 404 gone, 409 changed since indexed
        pixels = pixel_size(fh)
    out = photo_details(snap, file_id, pixels)
    roots = svc.roots_for_display()
    path = snap.paths[snap.id_to_pos[int(file_id)]]
    out["path"] = printable(path if roots is None else display_path(path, roots))
    out["name"] = printable(out["name"])
    return out
