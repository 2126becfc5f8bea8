"""A run's event log (append, checkpoint, read, pages for streams), its effect ledger, and the
presence of the streams that follow it."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.domain import Event, EventSlice, Status, Usage
from app.errors import LeaseLost
from app.queue.codec import (
    NewEvents,
    NewMessages,
    dumps,
    event_from_row,
    events_params,
    messages_params,
    usage_params,
)
from app.queue.statements import statement
from app.queue.store import Store

APPEND_EVENTS_IF_LEASED = statement("append_events_if_leased")
# For a batch with a thread message or usage: what only such runs pay for.
APPEND_EVENTS_IF_LEASED_WITH_EXTRAS = statement("append_events_if_leased_with_extras")
READ_EVENTS = statement("read_events")
READ_EVENT_PAGES = statement("read_event_pages")
GET_EFFECT = statement("get_effect")
RECORD_EFFECT_IF_LEASED = statement("record_effect_if_leased")
CHECK_LEASE = statement("check_lease")
ATTACH_SUBSCRIBER = statement("attach_subscriber")
TOUCH_SUBSCRIBERS = statement("touch_subscribers")
DETACH_SUBSCRIBERS = statement("detach_subscribers")


@dataclass(frozen=True, slots=True)
class Appended:
    """One run's new events (and, with a ``state``, its checkpoint), fenced by its claim."""

    run_id: uuid.UUID
    lease_id: uuid.UUID
    events: NewEvents = ()
    state: Any = None  # None: no checkpoint with these events
    messages: NewMessages = ()  # thread messages, stored only with a checkpoint
    usage: Usage | None = None  # consumed since the run's last stored write (with a checkpoint)


class Events(Store):
    async def append_events_many(self, appended: Sequence[Appended]) -> dict[uuid.UUID, int]:
        """Append many runs' events in one statement, each fenced by its own lease.

        Returns each written run's ``last_event_seq``; a run missing from the result lost its
        lease and nothing was written for it.
        """
        if not appended:
            return {}
        ordered = sorted(appended, key=lambda a: a.run_id)
        params: dict[str, Any] = {
            "run_ids": [a.run_id for a in ordered],
            "lease_ids": [a.lease_id for a in ordered],
            "states": [None if a.state is None else dumps(a.state) for a in ordered],
            "event_counts": [len(a.events) for a in ordered],
            "event_run_ids": [a.run_id for a in ordered for _ in a.events],
            "event_lease_ids": [a.lease_id for a in ordered for _ in a.events],
            **events_params([event for a in ordered for event in a.events]),
        }
        extras = {**messages_params([(a.run_id, a.messages) for a in ordered]), **usage_params(ordered)}
        chosen = APPEND_EVENTS_IF_LEASED
        if any(extras.values()):
            chosen, params = APPEND_EVENTS_IF_LEASED_WITH_EXTRAS, params | extras
        async with self._statement() as conn:
            rows = (await conn.execute(chosen, params)).all()
        return {row.id: row.last_event_seq for row in rows}

    async def append_events(
        self, *, run_id: uuid.UUID, lease_id: uuid.UUID, events: NewEvents, state: Any = None
    ) -> int:
        """:meth:`append_events_many` for one run (with a ``state``, also its checkpoint); its
        last seq, or :class:`LeaseLost` if the claim is no longer ours."""
        written = await self.append_events_many([Appended(run_id, lease_id, events, state)])
        if run_id not in written:
            raise LeaseLost(str(run_id))
        return written[run_id]

    async def read_events(self, run_id: uuid.UUID, *, after: int = 0, limit: int = 1000) -> list[Event]:
        """Events with ``seq > after`` in order; seqs commit in order, so none can appear later below."""
        async with self._statement() as conn:
            rows = (
                await conn.execute(READ_EVENTS, {"run_id": run_id, "after": after, "limit": limit})
            ).all()
        return [event_from_row(r) for r in rows]

    async def read_event_pages(
        self, cursors: Sequence[tuple[uuid.UUID, int]], *, limit: int
    ) -> list[EventSlice | None]:
        """For each ``(run_id, after)``: up to ``limit`` events after the cursor and the run's
        state, all from one snapshot; ``None`` for a run that no longer exists."""
        if not cursors:
            return []
        params = {"run_ids": [c[0] for c in cursors], "afters": [c[1] for c in cursors], "limit": limit}
        async with self._statement() as conn:
            rows = (await conn.execute(READ_EVENT_PAGES, params)).all()
        pages: list[EventSlice | None] = [None] * len(cursors)
        for i, status, last_event_seq, seq, type_, data in rows:
            page = pages[i - 1]
            if page is None:
                page = pages[i - 1] = EventSlice(Status(status), last_event_seq, [])
            if seq is not None:
                page.events.append((seq, type_, data))
        return pages

    async def find_effect(self, *, run_id: uuid.UUID, key: str) -> tuple[bool, Any]:
        """``(found, result)`` from the effect ledger."""
        async with self._statement() as conn:
            row = (await conn.execute(GET_EFFECT, {"run_id": run_id, "key": key})).first()
        return (True, row.result) if row else (False, None)

    async def record_effect(self, *, run_id: uuid.UUID, lease_id: uuid.UUID, key: str, result: Any) -> None:
        """Commit an effect record, fenced by the lease."""
        params = {"run_id": run_id, "lease_id": lease_id, "key": key, "result": dumps(result)}
        async with self._tx() as conn:
            if (await conn.execute(RECORD_EFFECT_IF_LEASED, params)).first() is None and (
                await conn.execute(CHECK_LEASE, {"run_id": run_id, "lease_id": lease_id})
            ).first() is None:
                raise LeaseLost(str(run_id))

    # -- subscriber presence -----------------------------------------------------------------

    async def attach_subscriber(self, *, run_id: uuid.UUID, subscriber_id: uuid.UUID) -> None:
        async with self._tx() as conn:
            await conn.execute(ATTACH_SUBSCRIBER, {"run_id": run_id, "subscriber_id": subscriber_id})

    async def touch_subscribers(self, subscriber_ids: Sequence[uuid.UUID]) -> None:
        if subscriber_ids:
            async with self._tx() as conn:
                await conn.execute(TOUCH_SUBSCRIBERS, {"subscriber_ids": list(subscriber_ids)})

    async def detach_subscribers(self, subscribers: Sequence[tuple[uuid.UUID, uuid.UUID]]) -> None:
        """Forget ``(run_id, subscriber_id)`` pairs whose streams closed, in one statement."""
        if not subscribers:
            return
        ordered = sorted(subscribers)  # a fixed lock order on the runs' rows
        params = {"run_ids": [s[0] for s in ordered], "subscriber_ids": [s[1] for s in ordered]}
        async with self._statement() as conn:
            await conn.execute(DETACH_SUBSCRIBERS, params)
