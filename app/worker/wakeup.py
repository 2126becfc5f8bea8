"""The worker's one LISTEN connection: new runs wake the claim loop, cancels reach runs at once,
new webhook deliveries wake the sender.

New runs arrive on two channels: the worker's own (``channels.wake``), notified when
``runq_wake_workers()`` picked its free slots for them, so one new run wakes one idle worker
and not the fleet (the runner passes on one it has no slot for); and the broadcast one, for
when the registry shows too few free slots.

NOTIFY only wakes; the table stays the truth, and the claim loop and the heartbeat poll it
anyway, so a notification lost while the connection was down costs latency, never a run.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable

from app.backoff import Backoff
from app.db.listen import listen_forever
from app.queue import channels


class Wakeup:
    """Keeps a LISTEN connection open, reconnecting with backoff; :meth:`run` never returns."""

    def __init__(
        self,
        dsn: str,
        *,
        worker_id: str,
        on_new_run: Callable[[bool], None],
        on_cancel: Callable[[uuid.UUID], None],
        on_webhook: Callable[[], None] | None = None,
        on_listening: Callable[[bool], None] = lambda _up: None,
        check_s: float = 5.0,
        max_backoff_s: float = 10.0,
    ) -> None:
        self._dsn = dsn
        self._own_channel = channels.wake(worker_id)
        self._on_new_run = on_new_run
        self._on_cancel = on_cancel
        self._on_webhook = on_webhook
        self._on_listening = on_listening
        self._check_s = check_s
        self._max_backoff_s = max_backoff_s

    async def run(self) -> None:
        handlers = {
            channels.RUNS: lambda _payload: self._on_new_run(False),
            self._own_channel: lambda _payload: self._on_new_run(True),  # targeted: for a free slot
            channels.CANCEL: self._cancel,
        }
        if self._on_webhook is not None:
            on_webhook = self._on_webhook
            handlers[channels.WEBHOOKS] = lambda _payload: on_webhook()
        await listen_forever(
            self._dsn,
            handlers,
            application_name="runq-listen",
            # claim (and send) what was announced while we were not listening
            on_connect=self._caught_up,
            on_disconnect=lambda: self._on_listening(False),
            probe_s=self._check_s,
            connect_timeout_s=self._check_s,
            backoff=Backoff(max_s=self._max_backoff_s),
        )

    def _caught_up(self) -> None:
        self._on_listening(True)
        self._on_new_run(False)
        if self._on_webhook is not None:
            self._on_webhook()

    def _cancel(self, payload: str) -> None:
        with contextlib.suppress(ValueError):
            self._on_cancel(uuid.UUID(payload))
