"""``GET /images/{id}`` (the indexed file, with byte ranges so video players can seek),
``GET /thumbs/{id}?t=`` (a thumbnail; a video's frame at ``t`` seconds) and ``GET /``
(the web page). Files are found by id only, never by a path from the request."""

from __future__ import annotations

import functools
import io
import mimetypes
import os
from importlib import resources
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, Response, StreamingResponse

from vsekit.media.images import ImageError
from vsekit.media.video import frame_at, is_video
from vsekit.serve.errors import ApiError
from vsekit.serve.state import Service, service

router = APIRouter()
Svc = Annotated[Service, Depends(service)]
THUMB_SIZE = 256
THUMB_CACHE = 2048


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """``(first, last)`` of a single ``Range: bytes=`` request (what players send to
    seek), None for no header; ApiError 416 for one this file cannot satisfy."""
    if not header:
        return None
    unit, _, spec = header.partition("=")
    first, sep, last = spec.strip().partition("-")
    try:
        if unit.strip() != "bytes" or not sep or "," in spec:
            raise ValueError
        if first == "":  # the last N bytes
            a, b = max(size - int(last), 0), size - 1
        else:
            a, b = int(first), min(int(last), size - 1) if last else size - 1
    except ValueError:
        raise ApiError(416, f"Range: {header[:60]!r} is not a single byte range") from None
    if a < 0 or a > b or a >= size:
        raise ApiError(416, f"Range: {header[:60]!r} is outside the file ({size} bytes)")
    return a, b


@router.get("/images/{file_id}")
def image(svc: Svc, file_id: int, request: Request) -> StreamingResponse:
    """The indexed file; a single byte range (206) lets video players seek."""
    fh = svc.open_indexed(file_id)
    size = os.fstat(fh.fileno()).st_size
    kind = mimetypes.guess_type(svc.path_of(file_id) or "")[0] or "application/octet-stream"
    try:
        span = byte_range(request.headers.get("range"), size)
    except ApiError:
        fh.close()
        raise
    first, last = span or (0, size - 1)
    fh.seek(first)

    def chunks():
        left = last - first + 1
        with fh:
            while left > 0 and (block := fh.read(min(1 << 16, left))):
                left -= len(block)
                yield block

    headers = {
        "Content-Length": str(last - first + 1),
        "Accept-Ranges": "bytes",
        "X-Content-Type-Options": "nosniff",
    }
    if span is None:
        return StreamingResponse(chunks(), media_type=kind, headers=headers)
    headers["Content-Range"] = f"bytes {first}-{last}/{size}"
    return StreamingResponse(chunks(), status_code=206, media_type=kind, headers=headers)


@router.get("/thumbs/{file_id}")
def thumb(svc: Svc, file_id: int, t: Annotated[float, Query(ge=0, le=1e6)] = 0.0) -> Response:
    """A JPEG thumbnail; for a video, of the frame shown at ``t`` seconds."""
    with svc.open_indexed(file_id) as fh:
        st = os.fstat(fh.fileno())
        is_clip = is_video(svc.path_of(file_id) or "")
        key = (file_id, st.st_size, st.st_mtime_ns, t if is_clip else 0.0)
        with svc.thumbs_lock:
            data = svc.thumbs.get(key)
        if data is None and is_clip:
            try:
                with svc.backbone_slots:  # decoding a video frame costs like a forward
                    im = frame_at(fh, t, 2 * THUMB_SIZE)
            except ImageError as e:
                raise ApiError(415, f"id: video {file_id} is not readable") from e
        elif data is None:
            im = svc.decode(fh, f"id: image {file_id}", 2 * THUMB_SIZE)
        if data is None:
            im.thumbnail((THUMB_SIZE, THUMB_SIZE))
            buf = io.BytesIO()
            im.save(buf, "JPEG", quality=85)
            data = buf.getvalue()
            with svc.thumbs_lock:
                svc.thumbs[key] = data
                while len(svc.thumbs) > THUMB_CACHE:
                    svc.thumbs.popitem(last=False)
    return Response(data, media_type="image/jpeg", headers={"Cache-Control": "max-age=3600"})


@functools.cache
def page() -> str:
    return (resources.files("vsekit") / "serve" / "static" / "index.html").read_text("utf-8")


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
def index_page() -> str:
    return page()
