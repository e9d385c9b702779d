"""The HTTP service over a collection index: a FastAPI app and its web page.

Endpoints (OpenAPI docs at ``/docs``):

* ``GET /search?q=&k=``: photos for a text query;
* ``POST /search/image``: photos similar to an uploaded image (multipart ``file``);
* ``POST /annotate``: best captions for an uploaded image;
* ``GET /annotate/{id}``: the same for an indexed image (from its stored embedding);
* ``GET /images/{id}``, ``GET /thumbs/{id}``: an indexed file or its thumbnail, by id only;
* ``GET /health``;
* ``GET /``: the web page.

Every error is a 4xx with a JSON body ``{"error": "..."}``; paths are never read from a
request, only from the index.
"""

from __future__ import annotations

import io
import threading
from collections import OrderedDict
from importlib import resources
from pathlib import Path
from typing import Annotated

from fastapi import FastAPI, File, Query, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from PIL import Image, ImageOps
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..images import ImageError, load_image
from ..index.collection import Collection, Hit
from ..index.query import (
    MAX_K,
    MAX_QUERY_CHARS,
    check_query,
    search_text_embedding,
    search_vector,
)
from ..runtime import VSEModel

MAX_UPLOAD_BYTES = 20 * 1024 * 1024
THUMB_SIZE = 256
THUMB_CACHE = 2048


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        self.status, self.message = status, message


def _hit_json(h: Hit) -> dict:
    return {
        "id": h.id,
        "path": h.path,
        "name": Path(h.path).name,
        "score": round(h.score, 6),
        "image": f"/images/{h.id}",
        "thumb": f"/thumbs/{h.id}",
    }


def create_app(coll: Collection, model: VSEModel, method: str = "auto") -> FastAPI:
    """The service for one collection and the model its embeddings come from."""
    app = FastAPI(
        title="vsekit",
        description="Search a photo collection by text or by image; annotate images.",
        version="1",
    )
    lock = threading.Lock()  # one SQLite connection and FAISS index, shared by requests
    pool = model.caption_pool
    thumbs: OrderedDict[tuple, bytes] = OrderedDict()

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

    def hits(fn, *args) -> list[Hit]:
        try:
            with lock:
                return fn(coll, model, *args, method=method)
        except ValueError as e:
            raise ApiError(400, str(e)) from e

    def read_upload(file: UploadFile) -> Image.Image:
        data = file.file.read(MAX_UPLOAD_BYTES + 1)
        if len(data) > MAX_UPLOAD_BYTES:
            raise ApiError(413, f"file: larger than {MAX_UPLOAD_BYTES // (1024 * 1024)} MB")
        if not data:
            raise ApiError(400, "file: empty upload")
        try:
            return load_image(io.BytesIO(data))
        except ImageError as e:
            raise ApiError(415, f"file: {file.filename or 'upload'} is not a readable image") from e

    def indexed_path(file_id: int) -> Path:
        with lock:
            coll.refresh()
            p = coll.path_of(file_id)
        if p is None:
            raise ApiError(404, f"id: no indexed image {file_id}")
        path = Path(p)
        if not path.is_file():
            raise ApiError(404, f"id: image {file_id} is no longer on disk")
        return path

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
        except ValueError as e:
            raise ApiError(400, str(e)) from e
        emb = model.encode_text([q])  # the model is read-only: encode outside the lock
        return {"query": q, "results": [_hit_json(h) for h in hits(search_text_embedding, emb, k)]}

    @app.post("/search/image")
    def search_image(
        file: Annotated[UploadFile, File()], k: Annotated[int, Query(ge=1, le=MAX_K)] = 20
    ) -> dict:
        im = read_upload(file)
        emb = model.encode_image(im)
        return {"results": [_hit_json(h) for h in hits(search_vector, emb, k)]}

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
        feats = model.image_features([read_upload(file)])
        return annotation(model.encode_image_features(feats), k, feats)

    @app.get("/annotate/{file_id}")
    def annotate_indexed(file_id: int, k: Annotated[int, Query(ge=1, le=50)] = 5) -> dict:
        with lock:
            coll.refresh()
            emb = coll.embedding_of(file_id)
        if emb is None:
            raise ApiError(404, f"id: no indexed image {file_id}")
        feats = None
        if model.tagger is not None:  # tags need the image features, not stored: recompute
            try:
                feats = model.image_features([indexed_path(file_id)])
            except (ImageError, ApiError):
                feats = None
        return annotation(emb, k, feats)

    @app.get("/images/{file_id}")
    def image(file_id: int) -> FileResponse:
        return FileResponse(indexed_path(file_id))

    @app.get("/thumbs/{file_id}")
    def thumb(file_id: int) -> Response:
        path = indexed_path(file_id)
        st = path.stat()
        key = (file_id, st.st_size, st.st_mtime_ns)
        data = thumbs.get(key)
        if data is None:
            try:
                with Image.open(path) as im:
                    im.draft("RGB", (2 * THUMB_SIZE, 2 * THUMB_SIZE))  # JPEG: decode small
                    im = ImageOps.exif_transpose(im).convert("RGB")
                    im.thumbnail((THUMB_SIZE, THUMB_SIZE))
                    buf = io.BytesIO()
                    im.save(buf, "JPEG", quality=85)
            except OSError as e:
                raise ApiError(404, f"id: image {file_id} can no longer be read") from e
            data = buf.getvalue()
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
