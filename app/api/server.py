"""``runq api``: uvicorn, programmatically, serving the app built from the given settings."""

from __future__ import annotations

import uvicorn

from app.settings import Settings

GRACEFUL_SHUTDOWN_S = 10  # open SSE streams are closed at shutdown; clients resume elsewhere


def serve(settings: Settings, *, database_url: str, host: str, port: int) -> None:
    """Serve the API on ``host:port`` against ``database_url`` (perhaps the embedded server just
    started) until SIGINT/SIGTERM."""
    from app.main import create_app

    app = create_app(settings.model_copy(update={"database_url": database_url}))
    uvicorn.run(
        app,
        host=host,
        port=port,
        proxy_headers=True,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        log_level="info",
    )
