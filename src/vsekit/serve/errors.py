"""Every error the service sends is JSON: ``{"error": "..."}`` with a 4xx status (a bug
is still JSON, with 500)."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from vsekit.index.schema import DamagedIndex


class ApiError(Exception):
    """A request the service refuses: its status and a one-line message."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        self.status, self.message, self.headers = status, message, headers


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_: Request, e: ApiError) -> JSONResponse:
        return JSONResponse({"error": e.message}, status_code=e.status, headers=e.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, e: RequestValidationError) -> JSONResponse:
        parts = []
        for err in e.errors():
            where = ".".join(str(x) for x in err.get("loc", ()) if x not in ("query", "body"))
            parts.append(f"{where}: {err.get('msg')}")
        return JSONResponse({"error": "; ".join(parts)}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, e: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"error": str(e.detail)}, status_code=e.status_code,
                            headers=getattr(e, "headers", None))  # fmt: skip

    @app.exception_handler(DamagedIndex)
    async def _damaged(_: Request, e: DamagedIndex) -> JSONResponse:  # --repair is the fix
        return JSONResponse({"error": " ".join(str(e).split())}, status_code=503)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, e: Exception) -> JSONResponse:  # a bug: still JSON
        return JSONResponse({"error": f"internal error ({type(e).__name__})"}, status_code=500)
