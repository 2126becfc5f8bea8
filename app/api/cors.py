"""CORS (``RUNQ_CORS_ORIGINS``): which browser pages on other origins may call runq, and a log
line for the ones that may not.

A page whose origin is not listed sees only ``TypeError: Failed to fetch``, and runq answered its
preflight with a bare 400 (or 405 with no origins set): neither side said what to change. Now the
first preflight from each such origin logs a warning naming the setting and the value that
would let it in.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from app.settings import Settings

log = logging.getLogger(__name__)

# What a frontend on another origin sends and may read. A preflight must name Authorization
# itself: "*" does not cover it. The LangGraph SDKs send their key as x-api-key, and useStream
# reads a new run's id from Content-Location (reconnectOnMount joins that run after a reload).
CORS_REQUEST_HEADERS = ["Authorization", "x-api-key", "Content-Type", "Last-Event-ID", "Idempotency-Key", "traceparent"]
CORS_EXPOSED_HEADERS = ["Location", "Content-Location", "Retry-After", "WWW-Authenticate", "RateLimit", "RateLimit-Policy"]
CORS_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]
MAX_REMEMBERED_ORIGINS = 1000  # a stream of made-up origins cannot grow the set without bound


def install_cors(app: FastAPI, settings: Settings) -> None:
    """Outermost middleware, so that refusals (401, 413, 429) carry the CORS headers too."""
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=CORS_METHODS,
            allow_headers=CORS_REQUEST_HEADERS,
            expose_headers=CORS_EXPOSED_HEADERS,
            max_age=600,
        )
    app.add_middleware(RefusedOrigins, allowed=settings.cors_origins)


class RefusedOrigins:
    """Log the first preflight of each origin that ``RUNQ_CORS_ORIGINS`` does not list."""

    def __init__(self, app: ASGIApp, *, allowed: list[str]) -> None:
        self.app = app
        self.allowed = set(allowed)
        self.logged: set[str] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "OPTIONS":
            headers = dict(scope["headers"])
            origin = headers.get(b"origin", b"").decode("latin-1")
            if origin and b"access-control-request-method" in headers and origin not in self.allowed:
                self._advise(origin, scope["path"])
        await self.app(scope, receive, send)

    def _advise(self, origin: str, path: str) -> None:
        if origin in self.logged or len(self.logged) >= MAX_REMEMBERED_ORIGINS:
            return
        self.logged.add(origin)
        listed = ",".join([*sorted(self.allowed), origin])
        log.warning(
            "a page on %s asked to call runq (CORS preflight of %s), but RUNQ_CORS_ORIGINS does not list"
            " that origin, so the browser refuses the call (the page sees 'Failed to fetch'); to allow it,"
            " start runq with RUNQ_CORS_ORIGINS=%s (logged once per origin)",
            origin,
            path,
            listed,
        )
