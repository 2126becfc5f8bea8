"""How an attempt ends: one batched, fenced statement for every ending (done, retry, dead,
cancelled, released, waiting), as River's ``JobSetStateIfRunningMany``."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.domain import Ending, Finish, Finished, Usage
from app.errors import LeaseLost
from app.queue.codec import (
    MAX_DATA_BYTES,
    EncodedEvents,
    NewEvents,
    NewMessages,
    encode,
    encoded_events_params,
    messages_params,
    storable_text,
    usage_params,
)
from app.queue.statements import statement
from app.queue.store import Store

FINISH_IF_LEASED = statement("finish_if_leased")
# For a batch with a wait, a thread message or usage: what only such runs pay for.
FINISH_IF_LEASED_WITH_EXTRAS = statement("finish_if_leased_with_extras")


@dataclass(frozen=True, slots=True)
class Ended:
    """One attempt to end: the claim it belongs to, its ending, and its buffered events. Every
    value the statement stores is JSON text already (the ending's own values too: ``output``
    for a done run, ``wait_payload`` and ``wait_state`` for a wait), encoded run by run
    (:meth:`encoded`), so nothing in the batched statement can fail for one run."""

    run_id: uuid.UUID
    lease_id: uuid.UUID
    finish: Finish
    events: EncodedEvents = ()
    messages: Sequence[str] = ()  # thread messages, stored if the run ends done or cancelled
    usage: Usage | None = None  # consumed since the run's last stored write
    output: str | None = None  # finish.output as JSON, for a done run
    wait_payload: str | None = None  # finish.wait's payload and checkpoint as JSON, for a wait
    wait_state: str | None = None

    @classmethod
    def encoded(
        cls, run_id: uuid.UUID, lease_id: uuid.UUID, finish: Finish, events: NewEvents = (),
        messages: NewMessages = (), *, limit: int = MAX_DATA_BYTES,
    ) -> Ended:
        """From values as an agent hands them; :class:`~app.errors.InvalidData` for one that
        cannot be stored."""
        wait = finish.wait
        return cls(
            run_id,
            lease_id,
            finish,
            [(t, encode(d, what=f"the data of a {t!r} event", limit=limit)) for t, d in events],
            [encode(m, what="a thread message", limit=limit) for m in messages],
            output=encode(finish.output, what="the output", limit=limit) if finish.ending is Ending.DONE else None,
            wait_payload=None if wait is None else encode(wait.payload, what="the wait's payload", limit=limit),
            wait_state=None if wait is None or wait.checkpoint is None else encode(wait.checkpoint, what="a checkpoint", limit=limit),
        )


class Endings(Store):
    async def finish_many(self, ended: Sequence[Ended]) -> dict[uuid.UUID, Finished]:
        """End many attempts in one statement, each fenced by its own lease.

        Returns how each run was left; a run missing from the result lost its lease and
        nothing was written for it.
        """
        if not ended:
            return {}
        ordered = sorted(ended, key=lambda e: e.run_id)  # a fixed lock order, as in renew_leases
        params: dict[str, Any] = {
            "run_ids": [e.run_id for e in ordered],
            "lease_ids": [e.lease_id for e in ordered],
            "endings": [e.finish.ending.value for e in ordered],
            "outputs": [e.output for e in ordered],
            "error_codes": [e.finish.error_code for e in ordered],
            "error_messages": [_message(e.finish) for e in ordered],
            "event_counts": [len(e.events) for e in ordered],
            "event_run_ids": [e.run_id for e in ordered for _ in e.events],
            "event_lease_ids": [e.lease_id for e in ordered for _ in e.events],
            **encoded_events_params([event for e in ordered for event in e.events]),
            "retry_base_s": self.retry.base_s,
            "retry_max_s": self.retry.max_s,
            "aging_s": self.aging_s,
        }
        extras = {
            **wait_params(ordered),
            **messages_params([(e.run_id, e.lease_id, e.messages) for e in ordered]),
            **usage_params(ordered),
        }
        chosen = FINISH_IF_LEASED
        if any(extras.values()):
            chosen, params = FINISH_IF_LEASED_WITH_EXTRAS, params | extras
        async with self._statement() as conn:
            rows = (await conn.execute(chosen, params)).all()
        return {f.id: f for f in map(Finished.from_row, rows)}  # row.id: a lookup by name per row

    async def finish(
        self, *, run_id: uuid.UUID, lease_id: uuid.UUID, finish: Finish, events: NewEvents = ()
    ) -> Finished:
        """:meth:`finish_many` for one attempt; :class:`LeaseLost` if the claim is no longer ours."""
        finished = await self.finish_many([Ended.encoded(run_id, lease_id, finish, events)])
        if run_id not in finished:
            raise LeaseLost(str(run_id))
        return finished[run_id]


def wait_params(ordered: Sequence[Ended]) -> dict[str, list[Any]]:
    """The waitpoints the ``waiting`` endings open (docs/waits.md), one row per such run."""
    waits = [(e, e.finish.wait) for e in ordered if e.finish.wait is not None]
    return {
        "wait_run_ids": [e.run_id for e, _ in waits],
        "waitpoint_ids": [w.waitpoint_id for _, w in waits],
        "wait_names": [w.name for _, w in waits],
        "wait_occurrences": [w.occurrence for _, w in waits],
        "wait_payloads": [e.wait_payload for e, _ in waits],
        "wait_timeouts": [w.timeout_s for _, w in waits],
        "wait_states": [e.wait_state for e, _ in waits],
    }


def _message(finish: Finish) -> str | None:
    return None if finish.error_message is None else storable_text(finish.error_message)
