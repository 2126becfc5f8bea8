"""A batched change redone without the rows that fail it.

The reaper changes up to hundreds of rows per statement (expired leases, timed-out waits,
abandoned runs): one row PostgreSQL refuses would roll back the whole batch, on every pass, and
the other rows would never be handled. Each batch runs in a SAVEPOINT; a batch that fails is
split in two and each half redone, until the row at fault is alone: it is skipped (logged with
its id, counted in ``runq_maintenance_errors_total{step}``) and every other row is changed as
if it had been alone. A database that cannot be reached fails the batch as it is: nothing is
skipped for that.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from prometheus_client import Counter
from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.errors import database_down, server_message

T = TypeVar("T")
# Defined here, where rows are skipped (app/metrics.py imports the queue, so not the other way).
MAINTENANCE_ERRORS = Counter(
    "runq_maintenance_errors_total",
    "Rows a background step could not handle (skipped or parked, each logged with its id), and steps that failed",
    ["step"],
)
_REPORTED_MAX = 1000

log = logging.getLogger(__name__)
_reported: dict[tuple[str, Any], None] = {}  # the rows reported, oldest first


async def without_failing_rows(
    conn: AsyncConnection,
    keys: Sequence[T],
    apply: Callable[[Sequence[T]], Awaitable[Sequence[Any]]],
    *,
    step: str,
    failed: Callable[[T, Exception], None] | None = None,
) -> list[Any]:
    """``apply(keys)``'s rows, or, when it fails, those of each half again, until the keys
    whose change fails alone are left out (reported, and handed to ``failed`` with the error,
    for a step that marks such a row, as schedules are parked)."""
    if not keys:
        return []
    try:
        async with conn.begin_nested():
            return list(await apply(keys))
    except Exception as exc:
        if database_down(exc):
            raise
        if len(keys) == 1:
            report_failed_row(step, keys[0], exc)
            if failed is not None:
                failed(keys[0], exc)
            return []
    half = len(keys) // 2
    return [
        *await without_failing_rows(conn, keys[:half], apply, step=step, failed=failed),
        *await without_failing_rows(conn, keys[half:], apply, step=step, failed=failed),
    ]


def report_failed_row(step: str, key: Any, exc: BaseException) -> None:
    """A row the step left out: counted each time, logged at error level once per row and
    process (a row that fails stays, and fails again on each pass)."""
    MAINTENANCE_ERRORS.labels(step=step).inc()
    first = _first_report(step, key)
    # PostgreSQL's message only: SQLAlchemy's text adds the statement and its parameters (data)
    log.log(logging.ERROR if first else logging.DEBUG, "%s: %s skipped, its change failed: %s",
            step, key, server_message(exc))


def _first_report(step: str, key: Any) -> bool:
    if (step, key) in _reported:
        return False
    if len(_reported) >= _REPORTED_MAX:
        del _reported[next(iter(_reported))]
    _reported[(step, key)] = None
    return True
