"""Server-Sent Events for one run: replay after the cursor, follow live events, close at the end.

The table is the truth: a stream only ever sends what it read from ``run_events`` with
``seq > cursor``, and seqs commit in order, so reading after the last seq sent can neither skip
nor repeat one. The hub's wakeup and a poll every ``RUNQ_POLL_S`` decide *when* to read.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import suppress

import anyio
from sse_starlette import EventSourceResponse, ServerSentEvent

from app.api.deps import Runtime
from app.domain import TERMINAL_EVENTS, DatabaseUnavailable, Event, Run, RunNotFound
from app.metrics import SSE_SUBSCRIBERS

log = logging.getLogger(__name__)

PAGE = 500
SEND_TIMEOUT_S = 30.0  # a client that accepts nothing for this long is dropped
DETACH_TIMEOUT_S = 5.0
LISTENING_POLL_S = 5.0


def frame(event: Event) -> ServerSentEvent:
    return ServerSentEvent(
        data=json.dumps(event.data, separators=(",", ":")), event=event.type, id=str(event.seq)
    )


def event_stream(runtime: Runtime, run: Run, *, after: int) -> EventSourceResponse:
    return EventSourceResponse(
        follow(runtime, run, after=after),
        ping=runtime.sse_ping_s,
        send_timeout=SEND_TIMEOUT_S,
    )


def _finished(run: Run, cursor: int) -> bool:
    # Terminal is not enough: an admin requeue may already have appended events after the
    # terminal one, and those must be sent before the stream may close.
    return run.is_terminal and cursor >= run.last_event_seq


async def follow(runtime: Runtime, run: Run, *, after: int) -> AsyncIterator[ServerSentEvent]:
    """The frames of ``run`` after seq ``after``, until it is terminal and all are sent.

    While open, the stream is a subscriber of the run (presence), which is what keeps an
    ``on_disconnect="cancel"`` run alive; leaving never cancels anything by itself.
    """
    queue = runtime.queue

    async def read_page(run_id: uuid.UUID, after: int) -> list[Event]:
        return await queue.read_events(run_id, after=after, limit=PAGE)

    subscriber_id = await runtime.presence.attach(run.id)
    SSE_SUBSCRIBERS.inc()
    cursor = after
    try:
        with runtime.hub.subscribe(run.id) as wake:
            while not _finished(run, cursor):
                wake.clear()
                try:
                    events = await runtime.hub.read(run.id, cursor, read_page)
                    for event in events:
                        yield frame(event)
                        cursor = event.seq
                    if len(events) == PAGE:
                        continue
                    if events and events[-1].type in TERMINAL_EVENTS:
                        run = await queue.get_run(run.id, tenant_id=run.tenant_id)
                        continue
                except DatabaseUnavailable as exc:
                    # Keep the stream (and its pings) open; the next read catches up.
                    log.warning("stream of run %s cannot read events: %s", run.id, exc)
                except RunNotFound:
                    return  # purged by retention while we watched
                # NOTIFY wakes us; the poll only covers a lost notification, so it can be slow
                # while LISTEN is up (a thousand streams polling fast would be a thousand reads).
                poll_s = runtime.settings.poll_s
                if runtime.hub.connected.is_set():
                    poll_s = max(poll_s, LISTENING_POLL_S)
                with suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), timeout=poll_s)
    finally:
        SSE_SUBSCRIBERS.dec()
        # The client is usually gone and our task cancelled: shield the detach so it happens.
        with anyio.move_on_after(DETACH_TIMEOUT_S, shield=True):
            try:
                await runtime.presence.detach(run.id, subscriber_id)
            except DatabaseUnavailable as exc:
                log.warning("could not detach stream of run %s: %s", run.id, exc)
