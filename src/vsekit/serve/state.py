"""What the routers share: the collection, its model, the guard settings, and the locks
and caches around them (one :class:`Service` per app, in ``app.state.service``)."""

from __future__ import annotations

import io
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from fastapi import Request, UploadFile
from PIL import Image

from vsekit.bundle import ModelError
from vsekit.index.collection import Collection, FileChanged, FileNotIndexed, Hit
from vsekit.index.scan import printable
from vsekit.index.schema import DamagedIndex
from vsekit.media.images import ImageError, ImageTooLarge, load_image
from vsekit.runtime import BaseModel
from vsekit.serve.errors import ApiError
from vsekit.serve.guard import GuardConfig

BACKBONE_SLOTS = 2


def display_path(path: str, roots: list[str]) -> str:
    """``path`` relative to the indexed folder holding it, prefixed by that folder's
    name (``photos/2019/a.jpg``): no absolute path leaves the server."""
    for r in sorted(roots, key=len, reverse=True):
        if path.startswith(r.rstrip("/") + "/"):
            return f"{Path(r).name}/{path[len(r.rstrip('/')) + 1 :]}"
    return Path(path).name


def hit_json(h: Hit, roots: list[str] | None) -> dict:
    out = {
        "id": h.id,
        "path": printable(h.path if roots is None else display_path(h.path, roots)),
        "name": printable(Path(h.path).name),
        "score": round(h.score, 6),
        "image": f"/images/{h.id}",
        "thumb": f"/thumbs/{h.id}",
        "video": h.start is not None,
    }
    if h.start is not None:  # the best segment of a video; its thumbnail is that frame
        out.update(start=h.start, end=h.end, thumb=f"/thumbs/{h.id}?t={h.start:g}")
    # a text search's relevance cue (strong | weak | none; null without a calibration)
    out["cue"] = h.cue
    # the other copies of this photo among the results (stacked search), best first
    out["copies"] = [hit_json(c, roots) for c in h.copies]
    return out


@dataclass(eq=False)
class Service:
    coll: Collection
    model: BaseModel
    guard: GuardConfig
    method: str = "auto"
    lock: threading.Lock = field(default_factory=threading.Lock)  # the collection's state
    # CNN forwards at once: more only adds activation memory, the cores are already busy
    backbone_slots: threading.BoundedSemaphore = field(
        default_factory=lambda: threading.BoundedSemaphore(BACKBONE_SLOTS)
    )
    thumbs: OrderedDict = field(default_factory=OrderedDict)
    thumbs_lock: threading.Lock = field(default_factory=threading.Lock)
    # the caption pool, computed once in the background the first time it is needed
    pool_lock: threading.Lock = field(default_factory=threading.Lock)
    pool_thread: threading.Thread | None = None
    pool_error: str | None = None

    def caption_pool(self, wait: float = 2.0):
        """The model's caption pool once it is ready. The first request starts computing
        it in the background (once: later requests join that work) and waits ``wait``
        seconds; until it is ready, 503 with Retry-After and how far it is."""
        pool = self.model.caption_pool
        if pool.ready:
            return pool
        try:
            if pool.compact is not None:  # shipped with the model: read, not computed
                pool.prepare()
                return pool
        except ModelError as e:  # a damaged installation: say which file
            raise ApiError(500, f"caption pool: {e}") from e
        with self.pool_lock:
            if self.pool_thread is None or not self.pool_thread.is_alive():
                self.pool_error = None
                self.pool_thread = threading.Thread(
                    target=self._prepare_pool, args=(pool,), name="caption-pool", daemon=True
                )
                self.pool_thread.start()
            thread = self.pool_thread
        thread.join(wait)
        if pool.ready:
            return pool
        if self.pool_error is not None:
            raise ApiError(503, f"caption pool: {self.pool_error}; retrying",
                           {"Retry-After": "5"})  # fmt: skip
        done, total = pool.progress or (0, len(pool.captions))
        raise ApiError(
            503,
            f"preparing the caption pool: {done:,} of {total:,} captions embedded "
            "(once per model); try again in a few seconds",
            {"Retry-After": "5"},
        )

    def _prepare_pool(self, pool) -> None:
        try:
            pool.prepare()
        except Exception as e:  # noqa: BLE001  (reported to the next request)
            self.pool_error = " ".join(str(e).split()) or type(e).__name__

    def roots_for_display(self) -> list[str] | None:
        if self.guard.show_paths:
            return None
        with self.lock:
            return self.coll.roots()

    def hits(self, fn, *args, **kw) -> list[Hit]:
        try:
            with self.lock:
                return fn(self.coll, self.model, *args, method=self.method, **kw)
        except DamagedIndex as e:  # the index's fault, not the request's
            raise ApiError(503, str(e)) from e
        except ValueError as e:
            raise ApiError(400, str(e)) from e

    def decode(self, src, what: str, reduce_to: int | None = None) -> Image.Image:
        try:
            return load_image(src, reduce_to)
        except ImageTooLarge as e:
            raise ApiError(413, f"{what}: {str(e).split(': ', 1)[-1]}") from e
        except ImageError as e:
            raise ApiError(415, f"{what}: not a readable image") from e

    def read_upload(self, file: UploadFile) -> Image.Image:
        limit = self.guard.max_upload_bytes
        data = file.file.read(limit + 1)
        if len(data) > limit:
            raise ApiError(413, f"file: larger than {limit // 2**20} MB")
        if not data:
            raise ApiError(400, "file: empty upload")
        return self.decode(io.BytesIO(data), f"file: {file.filename or 'upload'}",
                           self.model.decode_size)  # fmt: skip

    def open_indexed(self, file_id: int):
        """The verified open file of an indexed image (404 gone, 409 changed)."""
        with self.lock:
            try:
                return self.coll.open_file(file_id)
            except FileNotIndexed as e:
                raise ApiError(404, str(e)) from e
            except FileChanged as e:
                raise ApiError(409, str(e)) from e

    def embedding_of(self, file_id: int):
        with self.lock:
            return self.coll.embedding_of(file_id)

    def path_of(self, file_id: int) -> str | None:
        with self.lock:
            return self.coll.path_of(file_id)


def service(request: Request) -> Service:
    """The FastAPI dependency that hands a route the app's :class:`Service`."""
    return request.app.state.service
