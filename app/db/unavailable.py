"""Which exceptions mean "PostgreSQL cannot be reached now", wherever they escape from.

The API answers them with 503 and the CLI with one line; both ask here, so they agree.
"""

from __future__ import annotations

import asyncpg
from sqlalchemy import exc as sa_exc

from app.domain import DatabaseUnavailable
from app.queue import database_down

DATABASE_DOWN: tuple[type[Exception], ...] = (
    DatabaseUnavailable,
    sa_exc.OperationalError,
    sa_exc.InterfaceError,
    sa_exc.TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.CannotConnectNowError,
    asyncpg.TooManyConnectionsError,
    OSError,
)


def database_unreachable(exc: BaseException) -> bool:
    # A restarting server surfaces as a plain DBAPIError (by SQLSTATE), not a subclass.
    return isinstance(exc, DATABASE_DOWN) or (isinstance(exc, sa_exc.DBAPIError) and database_down(exc))
