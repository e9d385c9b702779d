"""The service's front door, for each HTTP request in this order:

1. **Host** (DNS rebinding), in :class:`GuardMiddleware`: the ``Host`` header's name must
   be one of ``allowed_hosts`` (the bound host and loopback names by default, plus
   ``--allow-host``); otherwise 403 with a JSON error naming the host. ``*`` allows any.
   (Starlette's ``TrustedHostMiddleware`` answers 400 in plain text and splits IPv6
   literals such as ``[::1]:8000`` wrongly, so it would not keep these guarantees.)
2. **Token**, in the same middleware, before anything of the body is read: when a token
   is set, every request needs it, as ``Authorization: Bearer``, ``X-Vse-Token``, the
   ``vse_token`` cookie (Starlette's lenient cookie parser, so one malformed cookie does
   not hide it) or a ``token`` query parameter (the page sets the cookie when opened as
   ``/?token=...``, so its images and requests carry it); otherwise 401. Compared in
   constant time. (FastAPI's security dependencies would run only after FastAPI has read
   and parsed the body: a client without the token could make the service spool a
   20 MB upload first. So the check stays here.)
3. **Body size**, in the same middleware: a ``Content-Length`` over ``max_upload_bytes``
   is refused before anything is read; a body without one is counted while it arrives
   and cut off with 413 as soon as it passes the limit, so nothing larger is ever
   spooled to disk (only a middleware sees the body before FastAPI reads it).
"""

from __future__ import annotations

import contextlib
import hmac
import json
from dataclasses import dataclass, field
from urllib.parse import parse_qs

from starlette.requests import cookie_parser

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

    def _token_ok(self, scope, headers: dict[bytes, bytes]) -> tuple[bool, bool]:
        """``(authorised, from_query)``."""
        want = self.cfg.token.encode()
        auth = headers.get(b"authorization", b"")
        offered = [
            auth[7:] if auth.lower().startswith(b"bearer ") else b"",
            headers.get(b"x-vse-token", b""),
            cookie_parser(headers.get(b"cookie", b"").decode("latin-1"))
            .get("vse_token", "")
            .encode(),
        ]
        if any(t and hmac.compare_digest(t, want) for t in offered):
            return True, False
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        from_query = [q.encode() for q in query.get("token", [])]
        return any(hmac.compare_digest(t, want) for t in from_query), True

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", []))
        host = host_name(headers.get(b"host", b"").decode("latin-1"))
        if "*" not in self.hosts and host not in self.hosts:
            await _send_json(send, 403, f"host: {host or '(none)'} is not served here")
            return
        set_cookie = ()
        if self.cfg.token:
            ok, from_query = self._token_ok(scope, headers)
            if not ok:
                await _send_json(
                    send, 401, "token: missing or wrong", [(b"www-authenticate", b"Bearer")]
                )
                return
            if from_query:  # remember it for the page's images and requests
                cookie = f"vse_token={self.cfg.token}; HttpOnly; SameSite=Strict; Path=/"
                set_cookie = ((b"set-cookie", cookie.encode()),)
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
                if set_cookie:
                    msg = {**msg, "headers": [*msg.get("headers", []), *set_cookie]}
            await send(msg)

        with contextlib.suppress(_BodyTooLarge):
            await self.app(scope, counted_receive, guarded_send)
        if state["too_large"] and not state["started"]:
            await _send_json(send, 413, too_large)


def add_guards(app, cfg: GuardConfig) -> None:
    """Wrap ``app`` (FastAPI) in :class:`GuardMiddleware` (host, body size)."""
    app.add_middleware(GuardMiddleware, cfg=cfg)
