"""Server-Sent Events for one run: replay after the cursor, follow live events, close at the end.

The table is the truth: a stream only ever sends what it read from ``run_events`` with
``seq > cursor``, and seqs commit in order, so reading after the last seq sent can neither skip
nor repeat one. The hub's wakeup and a poll every ``RUNQ_POLL_S`` decide *when* to read.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import suppress
from dataclasses import dataclass

from sse_starlette import EventSourceResponse, ServerSentEvent

from app.api.listener import Cursor, EventHub
from app.api.presence import Presence
from app.domain import TERMINAL, EventSlice, Run
from app.errors import DatabaseUnavailable
from app.metrics import SSE_SUBSCRIBERS
from app.queue import Queue

log = logging.getLogger(__name__)

PAGE = 500
SEND_TIMEOUT_S = 30.0  # a client that accepts nothing for this long is dropped
LISTENING_POLL_S = 5.0


@dataclass(frozen=True, slots=True)
class Page:
    """New frames of a run after a cursor, encoded once for every stream at that cursor."""

    body: bytes  # the SSE frames, sent as one chunk
    last_seq: int | None  # of the last frame; None when there was nothing new
    full: bool  # PAGE events: more may be waiting
    finished: bool  # the run is terminal and its last event is in this page or before
    events: Sequence[tuple[int, str, str]]  # what the frames encode, for the protocol streams


def encode(page: EventSlice, after: int) -> Page:
    body = b"".join(
        ServerSentEvent(data=data, event=type_, id=str(seq)).encode() for seq, type_, data in page.events
    )
    last_seq = page.events[-1][0] if page.events else None
    sent = after if last_seq is None else last_seq
    # A terminal run with nothing after the cursor, in the same snapshot as its status, never
    # gets more (its events all committed with or before that status): either all were sent,
    # or retention dropped the rest with their day's partition just before the run's row.
    finished = page.status in TERMINAL and (sent >= page.last_event_seq or not page.events)
    return Page(body, last_seq, len(page.events) >= PAGE, finished, page.events)


def event_hub(dsn: str, queue: Queue) -> EventHub[Page | None]:
    """The process's hub, reading pages of events for every stream it serves."""

    async def read_batch(cursors: Sequence[Cursor]) -> list[Page | None]:
        pages = await queue.read_event_pages(cursors, limit=PAGE)
        return [None if p is None else encode(p, after) for p, (_, after) in zip(pages, cursors, strict=True)]

    return EventHub(dsn, read_batch)


def ping_as_event() -> ServerSentEvent:
    """The keep-alive as an event: EventSource hides comments, so a browser that wants to notice
    a silent connection asks for this. No ``id``, so a reader's last event id stays the last seq."""
    return ServerSentEvent(event="ping", data="{}")


def event_stream(
    run: Run,
    *,
    after: int,
    hub: EventHub[Page | None],
    presence: Presence,
    poll_s: float,
    ping_s: float,
    ping_event: bool = False,
) -> EventSourceResponse:
    return EventSourceResponse(
        follow(run, after=after, hub=hub, presence=presence, poll_s=poll_s),
        # Streams opened together would otherwise ping together for ever: thousands of sends
        # in one turn of the loop, every frame behind them late. Each keeps its own phase.
        ping=ping_s * random.uniform(0.8, 1.0),
        ping_message_factory=ping_as_event if ping_event else None,
        send_timeout=SEND_TIMEOUT_S,
    )


def _finished(run: Run, cursor: int) -> bool:
    # Terminal is not enough: an admin requeue may already have appended events after the
    # terminal one, and those must be sent before the stream may close.
    return run.is_terminal and cursor >= run.last_event_seq


async def follow(
    run: Run, *, after: int, hub: EventHub[Page | None], presence: Presence, poll_s: float
) -> AsyncIterator[bytes]:
    """The SSE frames of ``run`` after seq ``after``, until it is terminal and all are sent."""
    async for page in follow_pages(run, after=after, hub=hub, presence=presence, poll_s=poll_s):
        yield page.body


async def follow_pages(
    run: Run, *, after: int, hub: EventHub[Page | None], presence: Presence, poll_s: float
) -> AsyncGenerator[Page]:
    """The non-empty pages of ``run``'s events after seq ``after``, until it is terminal and all
    are read (the protocol streams encode ``Page.events`` their own way).

    While open, the stream is a subscriber of the run (presence), which is what keeps an
    ``on_disconnect="cancel"`` run alive; leaving never cancels anything by itself.
    """
    subscriber_id = await presence.attach(run.id)
    SSE_SUBSCRIBERS.inc()
    cursor, finished = after, _finished(run, after)
    try:
        with hub.subscribe(run.id) as wake:
            while not finished:
                wake.clear()
                try:
                    page = await hub.read(run.id, cursor)
                except DatabaseUnavailable as exc:
                    # Keep the stream (and its pings) open; the next read catches up.
                    log.warning("stream of run %s cannot read events: %s", run.id, exc)
                else:
                    if page is None:
                        return  # purged by retention while we watched
                    if page.last_seq is not None:
                        yield page
                        cursor = page.last_seq
                    finished = page.finished
                    if page.full or finished:
                        continue
                # NOTIFY wakes us; the poll only covers a lost notification, so it can be slow
                # while LISTEN is up (a thousand streams polling fast would be a thousand reads).
                wait_s = max(poll_s, LISTENING_POLL_S) if hub.connected.is_set() else poll_s
                wait_s *= random.uniform(0.75, 1.25)  # spread out: streams opened together poll apart
                with suppress(TimeoutError):
                    async with asyncio.timeout(wait_s):  # no task per wait, unlike wait_for
                        await wake.wait()
    finally:
        SSE_SUBSCRIBERS.dec()
        presence.detach(run.id, subscriber_id)
