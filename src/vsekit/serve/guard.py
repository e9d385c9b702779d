"""The service's front door, for each HTTP request in this order:

1. **Host** (DNS rebinding), in :class:`GuardMiddleware`: the ``Host`` header's name must
   be one of ``allowed_hosts`` (the bound host and loopback names by default, plus
   ``--allow-host``); otherwise 403 with a JSON error naming the host. ``*`` allows any.
   (Starlette's ``TrustedHostMiddleware`` answers 400 in plain text and splits IPv6
   literals such as ``[::1]:8000`` wrongly, so it would not keep these guarantees.)
2. **Body size**, in the same middleware: a ``Content-Length`` over ``max_upload_bytes``
   is refused before anything is read; a body without one is counted while it arrives
   and cut off with 413 as soon as it passes the limit, so nothing larger is ever
   spooled to disk (only a middleware sees the body before FastAPI reads it).
3. **Token**, a FastAPI security dependency on every route (:func:`token_dependency`):
   when a token is set, every endpoint needs it, as ``Authorization: Bearer``,
   ``X-Vse-Token``, the ``vse_token`` cookie (Starlette's lenient cookie parser) or a
   ``token`` query parameter (the page sets the cookie when opened as ``/?token=...``, so
   its images and requests carry it); otherwise 401. Compared in constant time.
"""

from __future__ import annotations

import contextlib
import hmac
import json
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import HTTPException, Response, Security
from fastapi.security import (
    APIKeyCookie,
    APIKeyHeader,
    APIKeyQuery,
    HTTPAuthorizationCredentials,
    HTTPBearer,
)

from vsekit.serve import TOKEN_ENV  # noqa: F401  (re-exported)

LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass
class GuardConfig:
    token: str | None = None  # required on every endpoint when set
    allowed_hosts: list[str] = field(default_factory=lambda: list(LOOPBACK))  # "*": any
    max_upload_bytes: int = 20 * 1024 * 1024
    show_paths: bool = False  # send absolute file paths to clients


class _BodyTooLarge(Exception):
    pass


def host_name(host_header: str) -> str:
    """``"[::1]:8000" -> "::1"``, ``"example.org:80" -> "example.org"`` (lower-cased)."""
    h = host_header.strip().lower()
    if h.startswith("["):
        return h[1 : h.find("]")] if "]" in h else h
    return h.rsplit(":", 1)[0] if h.count(":") == 1 else h


async def _send_json(send, status: int, message: str, headers=()) -> None:
    body = json.dumps({"error": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class GuardMiddleware:
    def __init__(self, app, cfg: GuardConfig) -> None:
        self.app, self.cfg = app, cfg
        self.hosts = {h.lower().strip("[]") for h in cfg.allowed_hosts}

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", []))
        host = host_name(headers.get(b"host", b"").decode("latin-1"))
        if "*" not in self.hosts and host not in self.hosts:
            await _send_json(send, 403, f"host: {host or '(none)'} is not served here")
            return
        limit = self.cfg.max_upload_bytes
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            await _send_json(send, 413, f"body: larger than {limit // 2**20} MB")
            return
        seen = 0
        state = {"started": False, "too_large": False}
        too_large = f"body: larger than {limit // 2**20} MB"

        async def counted_receive():
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > limit:
                    state["too_large"] = True
                    raise _BodyTooLarge
            return msg

        async def guarded_send(msg):
            if state["too_large"]:  # whatever the app answers to a cut body, it is a 413
                if msg["type"] == "http.response.start" and not state["started"]:
                    state["started"] = True
                    await _send_json(send, 413, too_large)
                return
            if msg["type"] == "http.response.start":
                state["started"] = True
            await send(msg)

        with contextlib.suppress(_BodyTooLarge):
            await self.app(scope, counted_receive, guarded_send)
        if state["too_large"] and not state["started"]:
            await _send_json(send, 413, too_large)


def add_guards(app, cfg: GuardConfig) -> None:
    """Wrap ``app`` (FastAPI) in :class:`GuardMiddleware` (host, body size)."""
    app.add_middleware(GuardMiddleware, cfg=cfg)


# the four ways a token may come (module level: FastAPI resolves annotations here)
BEARER = HTTPBearer(auto_error=False)
HEADER = APIKeyHeader(name="X-Vse-Token", auto_error=False)
COOKIE = APIKeyCookie(name="vse_token", auto_error=False)
QUERY = APIKeyQuery(name="token", auto_error=False)


def token_dependency(token: str):
    """A FastAPI dependency that requires ``token`` (see the module docstring); it also
    documents the accepted ways in the OpenAPI schema."""
    want = token.encode()

    def same(offered: str | None) -> bool:
        return bool(offered) and hmac.compare_digest(offered.encode(), want)

    def require_token(
        response: Response,
        b: Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)],
        h: Annotated[str | None, Security(HEADER)],
        c: Annotated[str | None, Security(COOKIE)],
        q: Annotated[str | None, Security(QUERY)],
    ) -> None:
        if same(b.credentials if b else None) or same(h) or same(c):
            return
        if same(q):  # remember it for the page's images and requests
            response.set_cookie("vse_token", token, httponly=True, samesite="strict", path="/")
            return
        raise HTTPException(401, "token: missing or wrong", headers={"WWW-Authenticate": "Bearer"})

    return require_token
