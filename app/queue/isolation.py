"""A batch PostgreSQL refuses because of one row is redone without that row.

A background pass writes many rows in one statement; when PostgreSQL refuses it (a value, a
constraint, a trigger), the whole batch rolls back, though one row is at fault. Here the
statement runs in a SAVEPOINT and, refused, each half again, until the row at fault is alone:
it is reported, and every other row is written as if it had never been there. An unreachable
database is no row's fault: that is raised.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.errors import database_down, server_message

T = TypeVar("T")
R = TypeVar("R")


async def without_refused(
    conn: AsyncConnection,
    items: Sequence[T],
    write: Callable[[Sequence[T]], Awaitable[list[R]]],
    refused: Callable[[T, str], None],
) -> list[R]:
    """``write(items)`` in a savepoint of ``conn``'s transaction; what it returned for the items
    written. An item PostgreSQL refused alone goes to ``refused`` with the server's message."""
    if not items:
        return []
    try:
        async with conn.begin_nested():
            return await write(items)
    except DBAPIError as exc:
        if database_down(exc):
            raise
        if len(items) == 1:
            refused(items[0], server_message(exc))
            return []
    half = len(items) // 2
    written = await without_refused(conn, items[:half], write, refused)
    return written + await without_refused(conn, items[half:], write, refused)
