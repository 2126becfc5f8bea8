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
from dataclasses import KW_ONLY, dataclass

from app.backoff import Backoff
from app.db.listen import listen_forever
from app.queue import channels


@dataclass(frozen=True, slots=True)
class Wakeup:
    """Keeps a LISTEN connection open, reconnecting with backoff; :meth:`run` never returns."""

    dsn: str
    _: KW_ONLY
    worker_id: str
    on_new_run: Callable[[bool], None]  # True: on the worker's own channel, for a free slot
    on_cancel: Callable[[uuid.UUID], None]
    on_webhook: Callable[[], None] | None = None
    on_listening: Callable[[bool], None] = lambda _up: None
    check_s: float = 5.0
    max_backoff_s: float = 2.0

    async def run(self) -> None:
        handlers = {
            channels.RUNS: lambda _payload: self.on_new_run(False),
            channels.wake(self.worker_id): lambda _payload: self.on_new_run(True),
            channels.CANCEL: self._cancel,
        }
        if self.on_webhook is not None:
            on_webhook = self.on_webhook
            handlers[channels.WEBHOOKS] = lambda _payload: on_webhook()
        await listen_forever(
            self.dsn,
            handlers,
            application_name="runq-listen",
            # claim (and send) what was announced while we were not listening
            on_connect=self._caught_up,
            on_disconnect=lambda: self.on_listening(False),
            probe_s=self.check_s,
            connect_timeout_s=self.check_s,
            backoff=Backoff(max_s=self.max_backoff_s),
        )

    def _caught_up(self) -> None:
        self.on_listening(True)
        self.on_new_run(False)
        if self.on_webhook is not None:
            self.on_webhook()

    def _cancel(self, payload: str) -> None:
        with contextlib.suppress(ValueError):
            self.on_cancel(uuid.UUID(payload))
