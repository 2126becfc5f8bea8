"""How an attempt ends: done, retry or dead, cancelled, released; each write fenced by the lease."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from app.domain import Completed, Run
from app.queue.codec import NewEvents, dumps, events_params, storable_text
from app.queue.statements import statement
from app.queue.store import Store

COMPLETE_IF_LEASED = statement("complete_if_leased")
# Many completions of one worker in one statement: each run fenced by its own lease, each
# with its buffered events and then ``run.completed``.
COMPLETE_MANY_IF_LEASED = statement("complete_many_if_leased")
RETRY_OR_BURY = statement("retry_or_bury")
BURY_IF_LEASED = statement("bury_if_leased")
FINALIZE_CANCEL = statement("finalize_cancel")
RELEASE_IF_LEASED = statement("release_if_leased")


class Finish(Store):
    async def complete(
        self, *, run_id: uuid.UUID, lease_id: uuid.UUID, output: Any, events: NewEvents = ()
    ) -> Run:
        """``done`` with ``run.completed {output}``."""
        return await self._fenced(
            COMPLETE_IF_LEASED, run_id=run_id, lease_id=lease_id, output=dumps(output), **events_params(events)
        )

    async def complete_many(
        self, completions: Sequence[tuple[uuid.UUID, uuid.UUID, Any, NewEvents]]
    ) -> dict[uuid.UUID, Completed]:
        """``complete`` for many ``(run_id, lease_id, output, events)`` in one statement.

        Returns the runs now ``done``; a run missing from the result lost its lease (the same
        as :class:`LeaseLost` from ``complete``) and nothing was written for it.
        """
        if not completions:
            return {}
        ordered = sorted(completions, key=lambda c: c[0])  # a fixed lock order, as in renew_leases
        params = {
            "run_ids": [c[0] for c in ordered],
            "lease_ids": [c[1] for c in ordered],
            "outputs": [dumps(c[2]) for c in ordered],
            "event_run_ids": [c[0] for c in ordered for _ in c[3]],
            "types": [t for c in ordered for t, _ in c[3]],
            "datas": [dumps(d) for c in ordered for _, d in c[3]],
        }
        async with self._statement() as conn:
            rows = (await conn.execute(COMPLETE_MANY_IF_LEASED, params)).all()
        return {row.id: Completed(id=row.id, last_event_seq=row.last_event_seq) for row in rows}

    async def retry_or_bury(
        self,
        *,
        run_id: uuid.UUID,
        lease_id: uuid.UUID,
        error_code: str,
        error_message: str,
        events: NewEvents = (),
    ) -> Run:
        """A retryable failure: ``pending`` after backoff (``run.retrying``), or ``dead`` when
        attempts are used up (``run.failed``)."""
        return await self._fenced(
            RETRY_OR_BURY,
            run_id=run_id,
            lease_id=lease_id,
            error_code=error_code,
            error_message=storable_text(error_message),
            retry_base_s=self.retry_base_s,
            retry_max_s=self.retry_max_s,
            aging_s=self.aging_s,
            **events_params(events),
        )

    async def bury(
        self,
        *,
        run_id: uuid.UUID,
        lease_id: uuid.UUID,
        error_code: str,
        error_message: str,
        events: NewEvents = (),
    ) -> Run:
        """A fatal failure: ``dead`` at once with ``run.failed``."""
        return await self._fenced(
            BURY_IF_LEASED,
            run_id=run_id,
            lease_id=lease_id,
            error_code=error_code,
            error_message=storable_text(error_message),
            **events_params(events),
        )

    async def finalize_cancel(self, *, run_id: uuid.UUID, lease_id: uuid.UUID, events: NewEvents = ()) -> Run:
        """The worker honours a cancel request: ``cancelled`` with ``run.cancelled {reason}``."""
        return await self._fenced(FINALIZE_CANCEL, run_id=run_id, lease_id=lease_id, **events_params(events))

    async def release(self, *, run_id: uuid.UUID, lease_id: uuid.UUID, events: NewEvents = ()) -> Run:
        """Graceful shutdown: back to ``pending``, available at once, for another worker."""
        return await self._fenced(
            RELEASE_IF_LEASED, run_id=run_id, lease_id=lease_id, aging_s=self.aging_s, **events_params(events)
        )
