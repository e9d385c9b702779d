"""The HTTP service over a collection index: a FastAPI app and its web page.

Endpoints (OpenAPI docs at ``/docs``):

* ``GET /search?q=&k=``: photos and videos for a text query (a video hit names the
  ``start`` and ``end`` of its best segment, in seconds);
* ``POST /search/image``: photos similar to an uploaded image (multipart ``file``);
* ``POST /annotate``: best captions for an uploaded image;
* ``GET /annotate/{id}``: the same for an indexed image (from its stored embedding);
* ``GET /images/{id}``, ``GET /thumbs/{id}?t=``: an indexed file (byte ranges, so video
  players can seek) or its thumbnail (a video's frame at ``t`` seconds), by id only;
* ``GET /photos/{id}``: what the viewer shows about a photo (date, camera, place, size);
* ``GET /health``;
* ``GET /``: the web page.

Every error is a 4xx with a JSON body ``{"error": "..."}``; paths are never read from a
request, only from the index, and a file is served only while it is still the file that
was indexed (:meth:`~vsekit.index.Collection.open_file`: 404 if gone, 409 if changed).

Routers: :mod:`vsekit.serve.routers` (search, media, annotate), over one
:class:`~vsekit.serve.state.Service`.

Safety (see :mod:`vsekit.serve.guard`): uploads are cut off at ``MAX_UPLOAD_BYTES``
while they arrive; images are decoded under a pixel budget (413 above it); with a ``token``
every endpoint requires it; the ``Host`` header must name the bound host or an allowed
one (DNS rebinding); absolute paths reach clients only with ``show_paths``.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse

from vsekit.index.collection import Collection
from vsekit.runtime import BaseModel
from vsekit.serve.errors import ApiError, install_error_handlers
from vsekit.serve.guard import GuardConfig, add_guards
from vsekit.serve.routers import annotate, duplicates, media, photos, search
from vsekit.serve.state import Service

__all__ = ["ApiError", "create_app"]


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
        docs_url=None,  # served below (the guard's token covers them like every route)
        openapi_url=None,
    )
    app.state.service = Service(coll, model, guard, method)
    add_guards(app, guard)
    install_error_handlers(app)
    for r in (search.router, annotate.router, media.router, duplicates.router, photos.router):
        app.include_router(r)

    @app.get("/openapi.json", include_in_schema=False)
    def openapi() -> JSONResponse:
        return JSONResponse(app.openapi())

    # Swagger UI's files from a package (fastapi-offline's copy of swagger-ui 5, which
    # reads OpenAPI 3.1), not a CDN: /docs works offline
    from importlib import resources

    from fastapi.staticfiles import StaticFiles

    assets = str(resources.files("fastapi_offline") / "static")
    app.mount("/docs-assets", StaticFiles(directory=assets), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="vsekit API",
            swagger_js_url="/docs-assets/swagger-ui-bundle.js",
            swagger_css_url="/docs-assets/swagger-ui.css",
            swagger_favicon_url="/docs-assets/favicon.png",
        )

    return app
