"""``vse serve``: the HTTP API and the web page over an index."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from vsekit.cli._base import DEFAULT_INDEX, command, port_number
from vsekit.serve import TOKEN_ENV


@command
def _add_serve(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="HTTP API and web page over an index")
    p.add_argument("--index", default=DEFAULT_INDEX)
    p.add_argument("--model", help="model (default: the one the index was built with)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: localhost only)")
    p.add_argument("--port", type=port_number, default=8000)
    p.add_argument(
        "--token",
        default=os.environ.get(TOKEN_ENV),
        help="require this token on every endpoint (default: $VSEKIT_TOKEN); the way to "
        "expose the service on a network",
    )
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a Host name clients may use besides the bound host (repeatable; '*': any)",
    )
    p.add_argument("--show-paths", action="store_true", help="send absolute file paths to clients")
    p.add_argument(
        "--watch",
        metavar="FOLDER",
        action="append",
        default=[],
        help="keep the index in line with this folder while serving (repeatable)",
    )
    p.set_defaults(handler=_serve)


def _limit_malloc_arenas(n: int = 2) -> None:
    """glibc gives each of the server's worker threads its own malloc arena; with a
    thread pool that fragments memory into hundreds of MB. Two arenas, as
    ``MALLOC_ARENA_MAX=2`` would (a no-op where glibc is absent)."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(-8, n)  # M_ARENA_MAX
    except (OSError, AttributeError):
        pass


def is_wildcard(host: str) -> bool:
    """``host`` binds every interface: ``''``, ``0``, ``0.0.0.0``, ``::``, ``[::]``,
    ``0.0`` and every other spelling of the unspecified address."""
    import ipaddress
    import socket

    h = host.strip().strip("[]")
    if not h:
        return True
    try:
        return ipaddress.ip_address(h).is_unspecified
    except ValueError:
        pass
    try:  # the forms inet_aton accepts and uvicorn binds: "0", "0.0", "0x0"
        return socket.inet_aton(h) == b"\0\0\0\0"
    except OSError:
        return False


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from vsekit.index.api import open_index
    from vsekit.serve.app import create_app
    from vsekit.serve.guard import LOOPBACK, GuardConfig

    wildcard = is_wildcard(args.host)
    if wildcard and not args.allow_host:
        raise ValueError(
            "--host: binding every interface needs --allow-host NAME (the host names "
            "clients will use, or '*') and should have --token"
        )
    if args.host not in LOOPBACK and not args.token:
        print(f"warning: serving on {args.host} without --token", file=sys.stderr)
    hosts = [*LOOPBACK, *([] if wildcard else [args.host]), *args.allow_host]
    guard = GuardConfig(token=args.token, allowed_hosts=hosts, show_paths=args.show_paths)
    _limit_malloc_arenas()
    for folder in args.watch:
        if not Path(folder).expanduser().is_dir():
            raise ValueError(f"--watch: {folder}: not a folder")
    sock = bind(args.host, args.port)  # a busy port fails here, before any announcement
    index = open_index(args.index, args.model)  # the Python API's front door
    coll, model = index.collection, index.model
    app = create_app(coll, model, guard=guard)
    for folder in args.watch:
        start_watcher(coll, model, folder)
    server = uvicorn.Server(server_config(app, args.host, args.port))
    print(f"serving {len(coll)} images from {coll.path} on http://{args.host}:{args.port}/")
    sys.stdout.flush()
    server.run(sockets=[sock])
    return 0


def start_watcher(coll, model, folder: str):
    """A daemon thread that keeps the index in line with ``folder``, starting with an
    update at its first look (:mod:`vsekit.index.watch`); the server's searches see each
    update when it commits. Returns the thread's stop event."""
    import threading

    from vsekit.index.query import update_index
    from vsekit.index.watch import watch

    stop = threading.Event()

    def update():
        rep = update_index(coll, model, folder)
        print(f"{folder}: {rep.summary()}", file=sys.stderr, flush=True)
        return rep

    def warn(msg: str) -> None:
        print(f"warning: {msg}", file=sys.stderr, flush=True)

    def run() -> None:  # the first look updates (the index may be behind the folder)
        try:
            watch(folder, update, stop=stop, on_error=warn)
        except Exception as e:  # noqa: BLE001  (the server goes on; say why watching ended)
            warn(f"stopped watching {folder}: {e}")

    threading.Thread(target=run, name=f"watch {folder}", daemon=True).start()
    return stop


#: the request line and headers uvicorn (h11) buffers: above it, uvicorn answers a plain
#: text 400 that the app cannot turn into JSON; at 1 MiB, an over-long query reaches the
#: app, which refuses it in JSON
MAX_REQUEST_HEAD = 1 << 20


def server_config(app, host: str, port: int):
    """The uvicorn settings of ``vse serve`` (tests serve with the same): h11 with a
    head buffer of :data:`MAX_REQUEST_HEAD`, and a graceful shutdown of at most 3 s, so
    that SIGTERM ends the server within 5 s whatever a request is doing."""
    import uvicorn

    return uvicorn.Config(app, host=host, port=port, log_level="warning", http="h11",
                          h11_max_incomplete_event_size=MAX_REQUEST_HEAD,
                          timeout_graceful_shutdown=3)  # fmt: skip


def bind(host: str, port: int):
    """A listening socket on ``host:port``; one-line OSError naming them when busy."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.create_server((host.strip("[]"), port), family=family, reuse_port=False)
    except OSError as e:
        raise OSError(e.errno, f"cannot listen there ({e.strerror})", f"{host}:{port}") from e
    sock.set_inheritable(True)
    return sock
