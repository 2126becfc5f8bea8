"""Which PostgreSQL a command talks to: ``RUNQ_DATABASE_URL``, or the embedded one under ``.runq/``."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from app.settings import Settings

log = logging.getLogger(__name__)


@contextmanager
def database(settings: Settings) -> Iterator[str]:
    """Yield a database URL, starting (and afterwards stopping) the embedded server if needed."""
    if settings.database_url:
        yield settings.database_url
        return
    from app.db.embedded import EmbeddedPostgres

    server = EmbeddedPostgres(Path(settings.data_dir).resolve() / "pgdata")
    url = server.start()
    log.info("embedded PostgreSQL ready at %s", url)
    try:
        yield url
    finally:
        server.stop()
