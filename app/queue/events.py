"""A run's event log (append, checkpoint, read, pages for streams), its effect ledger, and the
presence of the streams that follow it."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple

from app.domain import Event, EventSlice, Status, Usage
from app.errors import LeaseLost
from app.queue.codec import (
    EncodedEvents,
    NewEvents,
    NewMessages,
    encode,
    encoded_events_params,
    event_from_row,
    messages_params,
    usage_params,
)
from app.queue.statements import statement
from app.queue.store import Store

APPEND_EVENTS_IF_LEASED = statement("append_events_if_leased")
# For a batch with a thread message, usage or a step's record: what only such runs pay for.
APPEND_EVENTS_IF_LEASED_WITH_EXTRAS = statement("append_events_if_leased_with_extras")
READ_EVENTS = statement("read_events")
READ_EVENT_PAGES = statement("read_event_pages")
GET_EFFECTS = statement("get_effects")
ATTACH_SUBSCRIBER = statement("attach_subscriber")
TOUCH_SUBSCRIBERS = statement("touch_subscribers")
DETACH_SUBSCRIBERS = statement("detach_subscribers")


@dataclass(frozen=True, slots=True)
class Appended:
    """One run's new events (and, with a ``state``, its checkpoint; with ``effects``, records
    of its effect ledger), fenced by its claim. Every value is JSON text already (see
    :func:`~app.queue.codec.encode` and :meth:`encoded`): nothing in the batched statement can
    fail for one run."""

    run_id: uuid.UUID
    lease_id: uuid.UUID
    events: EncodedEvents = ()
    state: str | None = None  # None: no checkpoint with these events
    messages: Sequence[str] = ()  # thread messages, sent only with a checkpoint or a record
    usage: Usage | None = None  # consumed since the run's last stored write (with a checkpoint or a record)
    effects: Sequence[tuple[str, str]] = ()  # (key, result): records of the effect ledger

    @classmethod
    def encoded(
        cls, run_id: uuid.UUID, lease_id: uuid.UUID, events: NewEvents = (), state: Any = None,
        messages: NewMessages = (), *, effects: Mapping[str, Any] | None = None,
    ) -> Appended:
        """From values as an agent hands them; :class:`~app.errors.InvalidData` for one that
        cannot be stored."""
        return cls(
            run_id,
            lease_id,
            [(t, encode(d, what=f"the data of a {t!r} event")) for t, d in events],
            None if state is None else encode(state, what="a checkpoint"),
            [encode(m, what="a thread message") for m in messages],
            effects=[(k, encode(v, what=f"the record of effect {k!r}")) for k, v in (effects or {}).items()],
        )


class Stored(NamedTuple):
    """What a run's append wrote: its last seq, and for the effect records whose keys the
    ledger held already, the records it holds (returned in place of the write's own)."""

    last_event_seq: int
    kept: Mapping[str, Any]


_NOTHING_KEPT: Mapping[str, Any] = MappingProxyType({})


class Events(Store):
    async def append_events_many(self, appended: Sequence[Appended]) -> dict[uuid.UUID, Stored]:
        """Append many runs' events in one statement, each fenced by its own lease.

        Returns what each written run stored; a run missing from the result lost its lease and
        nothing was written for it.
        """
        if not appended:
            return {}
        ordered = sorted(appended, key=lambda a: a.run_id)
        params: dict[str, Any] = {
            "run_ids": [a.run_id for a in ordered],
            "lease_ids": [a.lease_id for a in ordered],
            "states": [a.state for a in ordered],
            "event_counts": [len(a.events) for a in ordered],
            "event_run_ids": [a.run_id for a in ordered for _ in a.events],
            "event_lease_ids": [a.lease_id for a in ordered for _ in a.events],
            **encoded_events_params([event for a in ordered for event in a.events]),
        }
        extras = {
            **messages_params([(a.run_id, a.lease_id, a.messages) for a in ordered]),
            **usage_params(ordered),
            "effect_run_ids": [a.run_id for a in ordered for _ in a.effects],
            "effect_lease_ids": [a.lease_id for a in ordered for _ in a.effects],
            "effect_keys": [key for a in ordered for key, _ in a.effects],
            "effect_results": [result for a in ordered for _, result in a.effects],
        }
        chosen = APPEND_EVENTS_IF_LEASED
        if any(extras.values()):
            chosen, params = APPEND_EVENTS_IF_LEASED_WITH_EXTRAS, params | extras
        async with self._statement() as conn:
            rows = (await conn.execute(chosen, params)).all()
        return {run_id: Stored(seq, kept or _NOTHING_KEPT) for run_id, seq, kept in rows}

    async def append_events(
        self, *, run_id: uuid.UUID, lease_id: uuid.UUID, events: NewEvents, state: Any = None
    ) -> int:
        """:meth:`append_events_many` for one run (with a ``state``, also its checkpoint); its
        last seq, or :class:`LeaseLost` if the claim is no longer ours."""
        return (await self._append_one(Appended.encoded(run_id, lease_id, events, state))).last_event_seq

    async def record_effect(self, *, run_id: uuid.UUID, lease_id: uuid.UUID, key: str, result: Any) -> Any:
        """Commit an effect record, fenced by the lease like every worker write; the record the
        ledger holds for ``key`` (an earlier one, if there was one)."""
        stored = await self._append_one(Appended.encoded(run_id, lease_id, effects={key: result}))
        return stored.kept.get(key, result)

    async def _append_one(self, appended: Appended) -> Stored:
        written = await self.append_events_many([appended])
        if appended.run_id not in written:
            raise LeaseLost(str(appended.run_id))
        return written[appended.run_id]

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

    async def effects_of(self, run_id: uuid.UUID) -> dict[str, Any]:
        """The run's effect ledger, ``{key: result}``: every record that committed."""
        async with self._statement() as conn:
            rows = (await conn.execute(GET_EFFECTS, {"run_id": run_id})).all()
        return {row.key: row.result for row in rows}

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
