"""SQLAlchemy engines on asyncpg, each with a hard bound on its connections.

``pool_size + max_overflow`` and no more, however many tasks want one: a process's share of
``max_connections`` is set by configuration, never by its ``--concurrency`` or its number of
open streams. A task that finds every connection busy waits its turn (FIFO) for up to
``pool_timeout_s``: back-pressure, counted and logged, not an error; only a wait past the
timeout fails, as :class:`DatabaseUnavailable`. Other driver errors become domain errors in
:mod:`app.db.errors`.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Any, Literal

from sqlalchemy import event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import AsyncAdaptedQueuePool, ConnectionPoolEntry

from app.db import jsonb
from app.db.connect import connect
from app.db.errors import database_down
from app.db.url import async_url
from app.errors import DatabaseUnavailable
from app.metrics import DB_POOL_TIMEOUTS, DB_POOL_WAIT
from app.settings import Settings, get_settings

log = logging.getLogger(__name__)

Role = Literal["api", "worker", "cli"]
# Statements are short (a worker's event write or an API's batched read holds its connection
# for a millisecond or two), so ten serve a worker's 100 streaming runs: the streaming bench
# measured the same latency with 10 as with 20. A CLI command runs one statement at a time.
DEFAULT_POOL_SIZE: dict[Role, int] = {"api": 10, "worker": 10, "cli": 2}
POOL_TIMEOUT_S = 60.0
WAIT_LOG_EVERY_S = 10.0  # one warning line per pool at most this often, however many waits


def create_engine(
    url: str,
    *,
    pool_size: int = 10,
    max_overflow: int = 0,
    pool_timeout_s: float = POOL_TIMEOUT_S,
    application_name: str = "runq",
    prepared_statements: bool | None = None,
    generic_plans: bool = False,
) -> AsyncEngine:
    """An engine holding at most ``pool_size + max_overflow`` connections.

    Overflow connections are closed as soon as they are returned, so the default is none: a
    pool that opens and closes connections under load pays a backend fork and asyncpg's type
    introspection each time, exactly when the server is busiest. ``prepared_statements``
    (unset: ``RUNQ_DB_PREPARED_STATEMENTS``) false is for a transaction-mode pooler;
    ``generic_plans`` makes its sessions plan each prepared statement once (see
    :func:`worker_engines`).
    """
    if prepared_statements is None:
        prepared_statements = get_settings().db_prepared_statements
    server_settings = {"application_name": application_name}
    if generic_plans:
        server_settings["plan_cache_mode"] = "force_generic_plan"
    connect_args: dict[str, Any] = {"server_settings": server_settings, "async_creator_fn": connect}
    if not prepared_statements:
        connect_args |= POOLER_SAFE
    engine = create_async_engine(
        async_url(url),
        poolclass=BoundedPool if prepared_statements else PoolerPool,
        pool_size=pool_size,
        max_overflow=max_overflow,
        pool_timeout=pool_timeout_s,
        # No pre-ping: it doubles the round trips of every short transaction. A connection
        # that died with the server fails once, SQLAlchemy then invalidates the whole pool,
        # and callers see DatabaseUnavailable (503 / worker backoff) and retry.
        pool_recycle=1800,
        json_serializer=_dumps,
        json_deserializer=jsonb.loads,
        connect_args=connect_args,
    )
    event.listen(engine.sync_engine, "handle_error", _drop_when_down)
    return engine


def _drop_when_down(context: ExceptionContext) -> None:
    """Whatever makes the database unavailable drops the pool's connections, not only a dead
    socket: a server that answers but cannot write (a standby after a failover, a demoted
    primary, a stale address) would otherwise keep every pooled session, and each would fail
    again, for as long as it lives. The next checkout connects anew and finds the primary."""
    error = context.sqlalchemy_exception
    if error is not None and database_down(error):
        context.is_disconnect = True


def _statement_name() -> str:
    return f"__runq_{uuid.uuid4().hex}__"


# Behind a transaction-mode pooler (PgBouncer 1.18 has no prepared-statement support) each
# transaction may run on another server connection, which holds the statements other clients
# prepared there: asyncpg's own names (__asyncpg_stmt_1__, ...) collide, and a statement cached
# for reuse may be missing. So no cache (asyncpg's nor SQLAlchemy's), and a name of its own for
# every statement, prepared and run inside one transaction (SQLAlchemy always opens one).
POOLER_SAFE: dict[str, Any] = {
    "statement_cache_size": 0,
    "prepared_statement_cache_size": 0,
    "prepared_statement_name_func": _statement_name,
}


def engine_for(url: str, settings: Settings, *, role: Role, set_aside: int = 0) -> AsyncEngine:
    """A process's engine, bounded by ``RUNQ_DB_POOL_SIZE`` (else its role's default) less
    the sessions ``set_aside`` for another use, ``RUNQ_DB_MAX_OVERFLOW`` and
    ``RUNQ_DB_POOL_TIMEOUT_S``."""
    return create_engine(
        url,
        pool_size=_pool_size(settings, role) - set_aside,
        max_overflow=settings.db_max_overflow,
        pool_timeout_s=settings.db_pool_timeout_s,
        application_name=f"runq-{role}",
        prepared_statements=settings.db_prepared_statements,
    )


def _pool_size(settings: Settings, role: Role) -> int:
    return settings.db_pool_size or DEFAULT_POOL_SIZE[role]


def worker_engines(url: str, settings: Settings) -> tuple[AsyncEngine, AsyncEngine | None]:
    """A worker's pool, and the session of its claim loop (``None``: claims use the pool).

    The claim is the statement a worker runs most whose custom plan costs the most to make:
    0.6 ms of planning beside 2 ms of execution for 64 runs, every claim. Its generic plan is
    as fast, but the server never picks it on its own (it estimates ``LIMIT $1`` at a tenth
    of the pending runs), and ``plan_cache_mode`` is a session's setting, so the claim loop
    (one claim at a time) gets a session of its own, set aside from ``RUNQ_DB_POOL_SIZE``.
    Behind a pooler no plan is kept anyway, and a pool of one is not split.
    """
    if not settings.db_prepared_statements or _pool_size(settings, "worker") < 2:
        return engine_for(url, settings, role="worker"), None
    claims = create_engine(
        url,
        pool_size=1,
        pool_timeout_s=settings.db_pool_timeout_s,
        application_name="runq-worker",
        prepared_statements=True,
        generic_plans=True,
    )
    return engine_for(url, settings, role="worker", set_aside=1), claims


class BoundedPool(AsyncAdaptedQueuePool):
    """The asyncio queue pool, with its waits measured and its timeout a domain error."""

    autocommit = True  # see PoolerPool

    _waits = 0
    _longest_wait_s = 0.0
    _logged_at = float("-inf")

    def _do_get(self) -> ConnectionPoolEntry:
        if self._pool.qsize() > 0 or self._overflow < self._max_overflow:
            return super()._do_get()  # a connection is free, or may still be opened: no wait
        started = time.monotonic()
        try:
            return super()._do_get()
        except sa_exc.TimeoutError as exc:
            DB_POOL_TIMEOUTS.inc()
            raise DatabaseUnavailable(
                f"no database connection free within {self._timeout:.0f} s"
                f" (pool of {self.size() + self._max_overflow}): raise RUNQ_DB_POOL_SIZE"
            ) from exc
        finally:
            self._waited(time.monotonic() - started)

    def _waited(self, seconds: float) -> None:
        DB_POOL_WAIT.observe(seconds)
        self._waits += 1
        self._longest_wait_s = max(self._longest_wait_s, seconds)
        now = time.monotonic()
        if now - self._logged_at >= WAIT_LOG_EVERY_S:
            log.warning(
                "database pool busy: %d checkouts waited for a connection (longest %.0f ms) since"
                " the last report; the pool holds %d (RUNQ_DB_POOL_SIZE)",
                self._waits,
                self._longest_wait_s * 1000,
                self.size() + self._max_overflow,
            )
            self._waits, self._longest_wait_s, self._logged_at = 0, 0.0, now


class PoolerPool(BoundedPool):
    """The pool of an engine behind a transaction-mode pooler (``RUNQ_DB_PREPARED_STATEMENTS=false``)."""

    # A statement's prepare and its execution are two round trips, which only a transaction
    # keeps on one server connection: the pooler may hand the second to another one.
    autocommit = False


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)
