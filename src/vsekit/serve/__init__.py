"""The HTTP service (FastAPI): :func:`vsekit.serve.app.create_app`, its routers and
guards. This package's ``__init__`` stays light: the CLI reads ``TOKEN_ENV`` from it
without importing FastAPI."""

TOKEN_ENV = "VSEKIT_TOKEN"  # where `vse serve` reads its token from by default
