"""``vse serve``: the HTTP API and the web page over an index."""

from __future__ import annotations

import argparse
import os
import sys

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


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from vsekit.index.query import open_collection
    from vsekit.serve.app import create_app
    from vsekit.serve.guard import LOOPBACK, GuardConfig

    wildcard = args.host in ("0.0.0.0", "::", "")
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
    coll, model = open_collection(args.index, args.model)
    print(f"serving {len(coll)} images from {coll.path} on http://{args.host}:{args.port}/")
    sys.stdout.flush()
    app = create_app(coll, model, guard=guard)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
