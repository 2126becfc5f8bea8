"""SQLAlchemy engines on asyncpg (driver errors become domain errors in :mod:`app.db.errors`)."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine


def async_url(url: str) -> str:
    """Accept ``postgres://``/``postgresql://`` URLs and point them at the asyncpg driver."""
    parsed = make_url(url.replace("postgres://", "postgresql://", 1))
    return parsed.set(drivername="postgresql+asyncpg").render_as_string(hide_password=False)


def asyncpg_dsn(url: str) -> str:
    """The same URL for a raw asyncpg connection (LISTEN needs one outside the pool)."""
    parsed = make_url(url.replace("postgres://", "postgresql://", 1))
    return parsed.set(drivername="postgresql").render_as_string(hide_password=False)


def create_engine(url: str, *, pool_size: int = 10, application_name: str = "runq") -> AsyncEngine:
    return create_async_engine(
        async_url(url),
        pool_size=pool_size,
        max_overflow=pool_size,
        # No pre-ping: it doubles the round trips of every short transaction. A connection
        # that died with the server fails once, SQLAlchemy then invalidates the whole pool,
        # and callers see DatabaseUnavailable (503 / worker backoff) and retry.
        pool_recycle=1800,
        json_serializer=_dumps,
        connect_args={"server_settings": {"application_name": application_name}},
    )


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)
