"""The HTTP service over a collection index: a FastAPI app and its web page.

Endpoints (OpenAPI docs at ``/docs``):

* ``GET /search?q=&k=``: photos and videos for a text query (a video hit names the
  ``start`` and ``end`` of its best segment, in seconds);
* ``POST /search/image``: photos similar to an uploaded image (multipart ``file``);
* ``POST /annotate``: best captions for an uploaded image;
* ``GET /annotate/{id}``: the same for an indexed image (from its stored embedding);
* ``GET /images/{id}``, ``GET /thumbs/{id}?t=``: an indexed file (byte ranges, so video
  players can seek) or its thumbnail (a video's frame at ``t`` seconds), by id only;
* ``GET /health``;
* ``GET /``: the web page.

Every error is a 4xx with a JSON body ``{"error": "..."}``; paths are never read from a
request, only from the index, and a file is served only while it is still the file that
was indexed (:meth:`~vsekit.index.Collection.open_file`: 404 if gone, 409 if changed).

Safety (see :mod:`vsekit.serve.guard`): uploads are cut off at ``MAX_UPLOAD_BYTES`` while
they arrive; images are decoded under a pixel budget (413 above it); with a ``token``
every endpoint requires it; the ``Host`` header must name the bound host or an allowed
one (DNS rebinding); absolute paths reach clients only with ``show_paths``.
"""

from __future__ import annotations

import io
import mimetypes
import os
import threading
from collections import OrderedDict
from importlib import resources
from pathlib import Path
from typing import Annotated

from fastapi import FastAPI, File, Query, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from PIL import Image
from starlette.exceptions import HTTPException as StarletteHTTPException

from vsekit.index.collection import Collection, FileChanged, FileNotIndexed, Hit
from vsekit.index.query import (
    MAX_K,
    MAX_QUERY_CHARS,
    check_query,
    check_words,
    search_text_embedding,
    search_vector,
)
from vsekit.media.images import ImageError, ImageTooLarge, load_image
from vsekit.media.video import frame_at, is_video
from vsekit.runtime import BaseModel
from vsekit.serve.guard import GuardConfig, add_guards

BACKBONE_SLOTS = 2
THUMB_SIZE = 256
THUMB_CACHE = 2048


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        self.status, self.message = status, message


def _display_path(path: str, roots: list[str]) -> str:
    """``path`` relative to the indexed folder holding it, prefixed by that folder's
    name (``photos/2019/a.jpg``): no absolute path leaves the server."""
    for r in sorted(roots, key=len, reverse=True):
        if path.startswith(r.rstrip("/") + "/"):
            return f"{Path(r).name}/{path[len(r.rstrip('/')) + 1 :]}"
    return Path(path).name


def _hit_json(h: Hit, roots: list[str] | None) -> dict:
    out = {
        "id": h.id,
        "path": h.path if roots is None else _display_path(h.path, roots),
        "name": Path(h.path).name,
        "score": round(h.score, 6),
        "image": f"/images/{h.id}",
        "thumb": f"/thumbs/{h.id}",
        "video": h.start is not None,
    }
    if h.start is not None:  # the best segment of a video; its thumbnail is that frame
        out.update(start=h.start, end=h.end, thumb=f"/thumbs/{h.id}?t={h.start:g}")
    return out


def _byte_range(header: str | None, size: int) -> tuple[int, int] | None:
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


def create_app(
    coll: Collection, model: BaseModel, method: str = "auto", guard: GuardConfig | None = None
) -> FastAPI:
    """The service for one collection and the model its embeddings come from; ``guard``
    sets the token, allowed hosts, upload limit and whether paths are shown."""
    guard = guard or GuardConfig()
    app = FastAPI(
        title="vsekit",
        description="Search a photo collection by text or by image; annotate images.",
        version="1",
    )
    lock = threading.Lock()  # one SQLite connection and FAISS index, shared by requests
    pool = model.caption_pool
    thumbs: OrderedDict[tuple, bytes] = OrderedDict()
    thumbs_lock = threading.Lock()
    # CNN forwards at once: more only adds activation memory, the cores are already busy
    backbone_slots = threading.BoundedSemaphore(BACKBONE_SLOTS)
    add_guards(app, guard)

    def roots_for_display() -> list[str] | None:
        if guard.show_paths:
            return None
        with lock:
            return coll.roots()

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, e: ApiError) -> JSONResponse:
        return JSONResponse({"error": e.message}, status_code=e.status)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, e: RequestValidationError) -> JSONResponse:
        parts = []
        for err in e.errors():
            where = ".".join(str(x) for x in err.get("loc", ()) if x not in ("query", "body"))
            parts.append(f"{where}: {err.get('msg')}")
        return JSONResponse({"error": "; ".join(parts)}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, e: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"error": str(e.detail)}, status_code=e.status_code)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, e: Exception) -> JSONResponse:  # a bug: still JSON
        return JSONResponse({"error": f"internal error ({type(e).__name__})"}, status_code=500)

    def hits(fn, *args) -> list[Hit]:
        try:
            with lock:
                return fn(coll, model, *args, method=method)
        except ValueError as e:
            raise ApiError(400, str(e)) from e

    def decode(src, what: str, reduce_to: int | None = None) -> Image.Image:
        try:
            return load_image(src, reduce_to)
        except ImageTooLarge as e:
            raise ApiError(413, f"{what}: {str(e).split(': ', 1)[-1]}") from e
        except ImageError as e:
            raise ApiError(415, f"{what}: not a readable image") from e

    def read_upload(file: UploadFile) -> Image.Image:
        data = file.file.read(guard.max_upload_bytes + 1)
        if len(data) > guard.max_upload_bytes:
            raise ApiError(413, f"file: larger than {guard.max_upload_bytes // 2**20} MB")
        if not data:
            raise ApiError(400, "file: empty upload")
        return decode(io.BytesIO(data), f"file: {file.filename or 'upload'}", model.decode_size)

    def open_indexed(file_id: int):
        """The verified open file of an indexed image (404 gone, 409 changed)."""
        with lock:
            coll.refresh()
            try:
                return coll.open_file(file_id)
            except FileNotIndexed as e:
                raise ApiError(404, str(e)) from e
            except FileChanged as e:
                raise ApiError(409, str(e)) from e

    @app.get("/health")
    def health() -> dict:
        with lock:
            coll.refresh()
            n = len(coll)
        return {"status": "ok", "images": n, "model": coll.model_name}

    @app.get("/search")
    def search(
        q: Annotated[str, Query(min_length=1, max_length=MAX_QUERY_CHARS)],
        k: Annotated[int, Query(ge=1, le=MAX_K)] = 20,
    ) -> dict:
        try:
            q = check_query(q)
            check_words(model, q)
        except ValueError as e:
            raise ApiError(400, str(e)) from e
        emb = model.encode_text([q])  # the model is read-only: encode outside the lock
        found = hits(search_text_embedding, emb, k)
        return {"query": q, "results": [_hit_json(h, roots_for_display()) for h in found]}

    @app.post("/search/image")
    def search_image(
        file: Annotated[UploadFile, File()], k: Annotated[int, Query(ge=1, le=MAX_K)] = 20
    ) -> dict:
        im = read_upload(file)
        with backbone_slots:
            emb = model.encode_image(im)
        found = hits(search_vector, emb, k)
        return {"results": [_hit_json(h, roots_for_display()) for h in found]}

    def annotation(emb, k: int, feats=None) -> dict:
        caps = pool.best(emb, k)[0]
        tags = model.tags_from_features(feats, 10)[0] if feats is not None else []
        return {
            "captions": [{"text": c, "score": round(s, 6)} for c, s in caps],
            "tags": [{"tag": t, "score": round(s, 6)} for t, s in tags],
        }

    @app.post("/annotate")
    def annotate(
        file: Annotated[UploadFile, File()], k: Annotated[int, Query(ge=1, le=50)] = 5
    ) -> dict:
        im = read_upload(file)
        with backbone_slots:
            emb, feats = model.embed_with_features([im])
        return annotation(emb, k, feats)

    @app.get("/annotate/{file_id}")
    def annotate_indexed(file_id: int, k: Annotated[int, Query(ge=1, le=50)] = 5) -> dict:
        with lock:
            coll.refresh()
            emb = coll.embedding_of(file_id)
        if emb is None:
            raise ApiError(404, f"id: no indexed image {file_id}")
        feats = None
        with lock:
            clip = is_video(coll.path_of(file_id) or "")
        if model.tagger is not None and not clip:  # tags need the features: recompute
            with open_indexed(file_id) as fh:
                im = decode(fh, f"id: image {file_id}", model.decode_size)
            with backbone_slots:
                feats = model.image_features([im])
        return annotation(emb, k, feats)

    @app.get("/images/{file_id}")
    def image(file_id: int, request: Request) -> StreamingResponse:
        """The indexed file; a single byte range (206) lets video players seek."""
        fh = open_indexed(file_id)
        size = os.fstat(fh.fileno()).st_size
        with lock:
            name = coll.path_of(file_id) or ""
        kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
        try:
            span = _byte_range(request.headers.get("range"), size)
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

    @app.get("/thumbs/{file_id}")
    def thumb(file_id: int, t: Annotated[float, Query(ge=0, le=1e6)] = 0.0) -> Response:
        """A JPEG thumbnail; for a video, of the frame shown at ``t`` seconds."""
        with open_indexed(file_id) as fh:
            st = os.fstat(fh.fileno())
            with lock:
                is_clip = is_video(coll.path_of(file_id) or "")
            key = (file_id, st.st_size, st.st_mtime_ns, t if is_clip else 0.0)
            with thumbs_lock:
                data = thumbs.get(key)
            if data is None and is_clip:
                try:
                    with backbone_slots:  # decoding a video frame costs like a forward
                        im = frame_at(fh, t, 2 * THUMB_SIZE)
                except ImageError as e:
                    raise ApiError(415, f"id: video {file_id} is not readable") from e
            elif data is None:
                im = decode(fh, f"id: image {file_id}", 2 * THUMB_SIZE)
            if data is None:
                im.thumbnail((THUMB_SIZE, THUMB_SIZE))
                buf = io.BytesIO()
                im.save(buf, "JPEG", quality=85)
                data = buf.getvalue()
                with thumbs_lock:
                    thumbs[key] = data
                    while len(thumbs) > THUMB_CACHE:
                        thumbs.popitem(last=False)
        headers = {"Cache-Control": "max-age=3600"}
        return Response(data, media_type="image/jpeg", headers=headers)

    page = (resources.files("vsekit") / "serve" / "static" / "index.html").read_text("utf-8")

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def index_page() -> str:
        return page

    return app
