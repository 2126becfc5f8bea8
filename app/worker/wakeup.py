"""The worker's one LISTEN connection: new runs wake the claim loop, cancels reach runs at once.

NOTIFY only wakes; the table stays the truth, and the claim loop and the heartbeat poll it
anyway, so a notification lost while the connection was down costs latency, never a run.
The connection is a raw asyncpg session outside the pool: LISTEN belongs to one session and
must not pass through a transaction-mode pooler.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable

import asyncpg

from app.queue import CANCEL_CHANNEL, RUNS_CHANNEL, WEBHOOKS_CHANNEL

log = logging.getLogger(__name__)

_MIN_BACKOFF_S = 0.1
_CONNECTION_ERRORS = (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError)


class Wakeup:
    """Keeps a LISTEN connection open, reconnecting with backoff; :meth:`run` never returns."""

    def __init__(
        self,
        dsn: str,
        *,
        on_new_run: Callable[[], None],
        on_cancel: Callable[[uuid.UUID], None],
        on_webhook: Callable[[], None] | None = None,
        check_s: float = 5.0,
        max_backoff_s: float = 10.0,
    ) -> None:
        self._dsn = dsn
        self._on_new_run = on_new_run
        self._on_cancel = on_cancel
        self._on_webhook = on_webhook
        self._check_s = check_s
        self._max_backoff_s = max_backoff_s

    async def run(self) -> None:
        backoff = _MIN_BACKOFF_S
        while True:
            started = time.monotonic()
            try:
                await self._listen()
            except _CONNECTION_ERRORS as exc:
                if time.monotonic() - started > self._check_s:
                    backoff = _MIN_BACKOFF_S  # it had been up: this is a new outage
                log.warning("LISTEN connection lost (%s); reconnecting in %.1f s", exc, backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self._max_backoff_s)

    async def _listen(self) -> None:
        conn: asyncpg.Connection = await asyncio.wait_for(
            asyncpg.connect(self._dsn, server_settings={"application_name": "runq-listen"}),
            self._check_s,
        )
        closed = asyncio.Event()
        conn.add_termination_listener(lambda _conn: closed.set())
        try:
            await conn.add_listener(RUNS_CHANNEL, self._notified)
            await conn.add_listener(CANCEL_CHANNEL, self._notified)
            if self._on_webhook is not None:
                await conn.add_listener(WEBHOOKS_CHANNEL, self._notified)
                self._on_webhook()
            self._on_new_run()  # claim what was announced while we were not listening
            while not closed.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(closed.wait(), self._check_s)
                if not closed.is_set():
                    # A dead peer sends nothing; only a round trip tells a quiet connection
                    # from a broken one.
                    await asyncio.wait_for(conn.fetchval("SELECT 1"), self._check_s)
            raise ConnectionResetError("the server closed the connection")
        finally:
            conn.terminate()

    def _notified(self, _conn: object, _pid: int, channel: str, payload: str) -> None:
        if channel == CANCEL_CHANNEL:
            with contextlib.suppress(ValueError):
                self._on_cancel(uuid.UUID(payload))
        elif channel == WEBHOOKS_CHANNEL and self._on_webhook is not None:
            self._on_webhook()
        else:
            self._on_new_run()
