"""``runq api``: uvicorn, programmatically, serving ``app.main:app``."""

from __future__ import annotations

import os

import uvicorn

from app.settings import Settings, get_settings

GRACEFUL_SHUTDOWN_S = 10  # open SSE streams are closed at shutdown; clients resume elsewhere


def serve(settings: Settings, *, database_url: str, host: str, port: int) -> None:
    """Serve the API on ``host:port`` against ``database_url`` until SIGINT/SIGTERM."""
    # app.main builds its app from the environment at import, so the URL (perhaps of the
    # embedded server just started) must be there first, and the cached settings dropped.
    os.environ["RUNQ_DATABASE_URL"] = database_url
    if settings.secret_key:
        os.environ.setdefault("RUNQ_SECRET_KEY", settings.secret_key)
    get_settings.cache_clear()
    uvicorn.run(
        "app.main:app",
        host=host,
        port=port,
        proxy_headers=True,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        log_level="info",
    )
