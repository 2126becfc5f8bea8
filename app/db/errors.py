"""The one place where driver errors become domain errors.

A database that is down, restarting, refusing connections or unable to write (a standby, a
primary demoted or behind a stale address: no primary) must look the same to every caller,
whichever driver layer noticed it (SQLAlchemy's pool, the asyncpg dialect, a raw asyncpg
LISTEN session): :class:`~app.errors.DatabaseUnavailable`, retried later by the worker and
answered 503 by the API. Everything else is a bug and stays what it is.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import asyncpg
from sqlalchemy import exc as sa_exc

from app.errors import DatabaseUnavailable

# Raised when the server cannot be reached or went away, whatever the statement.
CONNECTION_ERRORS: tuple[type[Exception], ...] = (
    OSError,  # refused, reset, unreachable (ConnectionError is one)
    TimeoutError,
    sa_exc.InterfaceError,
    sa_exc.OperationalError,
    sa_exc.TimeoutError,  # the pool could not hand out a connection in time
    asyncpg.InterfaceError,
    asyncpg.PostgresConnectionError,
    asyncpg.CannotConnectNowError,
    asyncpg.TooManyConnectionsError,
    asyncpg.TargetServerAttributeNotMatched,  # no host of the list is a primary (yet)
)
# A server going away, restarting or not taking connections yet: connection exceptions (class
# 08), admin/crash shutdown and "cannot connect now" (57P01-57P03), too many connections. The
# asyncpg dialect wraps these as a plain DBAPIError, with the SQLSTATE on ``orig``. And a
# server that answers but cannot write (25006 read_only_sql_transaction: a hot standby, a
# demoted primary, default_transaction_read_only) is no primary: the same as none at all.
_UNAVAILABLE_SQLSTATES = ("08", "57P01", "57P02", "57P03", "53300", "25006")


# What a statement's data made PostgreSQL refuse: a data exception (class 22: a value out of
# range, a malformed one) or a program limit (class 54: a value too large, nested too deeply).
_DATA_SQLSTATES = ("22", "54")


def _sqlstate(exc: BaseException) -> str:
    cause = exc.orig if isinstance(exc, sa_exc.DBAPIError) else exc
    return getattr(cause, "sqlstate", None) or ""


def refused_data(exc: BaseException) -> bool:
    """Whether ``exc`` is PostgreSQL refusing a value of the statement (not the statement
    itself, not the connection): the run that sent it is at fault, no other."""
    return _sqlstate(exc).startswith(_DATA_SQLSTATES)


def server_message(exc: BaseException) -> str:
    """What PostgreSQL said, without the statement and parameters SQLAlchemy adds to it (the
    asyncpg dialect wraps asyncpg's own exception, whose text is the server's message)."""
    cause = exc.orig if isinstance(exc, sa_exc.DBAPIError) else exc
    return str(getattr(cause, "__cause__", None) or cause)


def database_down(exc: BaseException) -> bool:
    """Whether ``exc`` means PostgreSQL cannot be reached now (retry later), not a bad statement."""
    if isinstance(exc, (DatabaseUnavailable, *CONNECTION_ERRORS)):
        return True
    if isinstance(exc, sa_exc.DBAPIError):
        if exc.connection_invalidated:
            return True
        # The dialect wraps what asyncpg raised while connecting (no host of the list a
        # primary, say) in a generic error; asyncpg's own is its cause.
        if isinstance(exc.orig, Exception) and isinstance(exc.orig.__cause__, CONNECTION_ERRORS):
            return True
    return _sqlstate(exc).startswith(_UNAVAILABLE_SQLSTATES)


@contextmanager
def translated() -> Iterator[None]:
    """Inside, an unreachable database raises :class:`DatabaseUnavailable` (``from`` the
    driver's error); any other error passes unchanged."""
    try:
        yield
    except DatabaseUnavailable:
        raise
    except Exception as exc:
        if database_down(exc):
            detail = exc.orig if isinstance(exc, sa_exc.DBAPIError) and exc.orig is not None else exc
            raise DatabaseUnavailable(str(detail)) from exc
        raise
