"""One LISTEN session kept open for as long as the process runs.

LISTEN belongs to one session and must not pass through a transaction-mode pooler, so the
connection is a raw asyncpg one outside the pool. NOTIFY only wakes; the tables stay the
truth, so a notification lost while the connection was down costs latency, never a run:
``on_connect`` runs after every (re)connect, for whatever was announced while deaf.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping

import asyncpg

from app.backoff import Backoff
from app.db.connect import connect
from app.db.errors import database_down

log = logging.getLogger(__name__)

Handler = Callable[[str], None]  # called with the notification's payload


async def listen_forever(
    dsn: str,
    channels: Mapping[str, Handler],
    *,
    application_name: str,
    on_connect: Callable[[], None],
    on_disconnect: Callable[[], None] = lambda: None,
    probe_s: float = 5.0,
    connect_timeout_s: float = 10.0,
    backoff: Backoff | None = None,
) -> None:
    """Listen on ``channels`` and reconnect with backoff, never returning (cancel to stop)."""
    backoff = backoff or Backoff()
    while True:
        connected_at: float | None = None

        def up() -> None:
            nonlocal connected_at
            connected_at = time.monotonic()
            on_connect()

        try:
            await _listen_once(
                dsn, channels, application_name=application_name, on_connect=up,
                probe_s=probe_s, connect_timeout_s=connect_timeout_s,
            )
        except Exception as exc:  # whatever broke the connection, this loop must live on
            if connected_at is not None and time.monotonic() - connected_at > probe_s:
                backoff.reset()  # it had been up: this is a new outage, not the same one
            log.warning(
                "LISTEN connection lost (%r); reconnecting in %.1f s",
                exc,
                backoff.peek(),
                exc_info=not database_down(exc),
            )
        if connected_at is not None:
            on_disconnect()
        await asyncio.sleep(backoff.next())


async def _listen_once(
    dsn: str,
    channels: Mapping[str, Handler],
    *,
    application_name: str,
    on_connect: Callable[[], None],
    probe_s: float,
    connect_timeout_s: float,
) -> None:
    """Listen until the connection dies; a probe notices a silently dead socket."""
    # asyncpg's own timeouts, not asyncio.wait_for: on Python 3.11 wait_for can swallow a
    # cancel that arrives as the connection completes, and a hub being stopped then never stops.
    conn: asyncpg.Connection = await connect(
        dsn, per_host_timeout_s=connect_timeout_s, server_settings={"application_name": application_name}
    )
    lost = asyncio.Event()
    conn.add_termination_listener(lambda _conn: lost.set())
    try:
        for channel, handler in channels.items():
            await conn.add_listener(channel, lambda _c, _pid, _ch, payload, handler=handler: handler(payload))
        on_connect()
        while not lost.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(probe_s):
                    await lost.wait()
            if not lost.is_set():
                # A dead peer sends nothing; only a round trip tells a quiet connection
                # from a broken one.
                await conn.fetchval("SELECT 1", timeout=probe_s)
        raise ConnectionResetError("the server closed the connection")
    finally:
        conn.terminate()
