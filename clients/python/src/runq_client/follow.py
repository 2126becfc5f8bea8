"""Following one run's events across connections, without I/O (shared by both clients).

The server numbers a run's events 1, 2, 3, ... and resumes a stream after any seq (``?after=``),
so the only state that matters is the last seq handed to the caller: every connection asks for
what comes after it, and anything at or below it (a replay overlap) is dropped. A connection may
be cut anywhere; the stream ends only after the terminal event, or once the run is known to be
terminal with nothing left to send.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping

import httpx

from runq_client.calls import Call, RetryPolicy, problem
from runq_client.errors import RunqConnectionError, RunqError, RunqTimeout
from runq_client.models import Event, Run
from runq_client.operations import RunId, stream_events
from runq_client.sse import SSEDecoder


class Deadline:
    """An optional point in time (monotonic clock) that waiting must not pass."""

    def __init__(self, timeout: float | None) -> None:
        self.at = None if timeout is None else time.monotonic() + timeout

    def remaining(self) -> float | None:
        return None if self.at is None else max(0.0, self.at - time.monotonic())

    def check(self) -> None:
        if self.at is not None and time.monotonic() >= self.at:
            raise RunqTimeout("the run did not finish in time")

    def cap(self, seconds: float) -> float:
        left = self.remaining()
        return seconds if left is None else min(seconds, left)


class Follow:
    """Where the stream of one run stands; drive it with ``request``/``opened``/``feed``/..."""

    def __init__(self, run_id: RunId, after: int, retry: RetryPolicy) -> None:
        if after < 0:
            raise ValueError("after must be a seq (0 or more)")
        self.run_id = run_id
        self.last_seq = after
        self.done = False
        self.retry = retry
        self.failures = 0  # consecutive connections that brought no new event
        self._decoder = SSEDecoder()
        self._progress = False
        self._call = stream_events(run_id, after)

    def request(self) -> Call[None]:
        """The next connection: everything after the last seq delivered."""
        self._decoder = SSEDecoder()
        self._progress = False
        self._call = stream_events(self.run_id, self.last_seq)
        return self._call

    def rejected(self, status: int, headers: Mapping[str, str], content: bytes) -> float:
        """A non-200 answer: seconds to wait before retrying, or the problem raised."""
        delay = self.retry.after_status(self._call, self.failures, status, headers)
        if delay is None:
            raise problem(status, content)
        self.failures += 1
        return delay

    def feed(self, chunk: bytes) -> list[Event]:
        """The new events in ``chunk``, in order, none seen before, nothing after the terminal one."""
        events: list[Event] = []
        for message in self._decoder.feed(chunk):
            if self.done:
                break
            seq = message.id
            if seq is None or not seq.isdigit() or int(seq) <= self.last_seq:
                continue
            try:
                data = json.loads(message.data)
            except ValueError as exc:
                raise RunqError(200, "invalid_response", f"event {seq} has no JSON data") from exc
            if not isinstance(data, dict):
                raise RunqError(200, "invalid_response", f"event {seq}'s data is not an object")
            event = Event(seq=int(seq), type=message.event, data=data)
            self.last_seq = event.seq
            self._progress = True
            self.done = event.is_terminal
            events.append(event)
        if self._progress:
            self.failures = 0
        return events

    def settle(self, run: Run) -> None:
        """After a connection closed without the terminal event: done if the run is terminal and
        every one of its events was delivered (e.g. the stream was opened after its end)."""
        if run.is_terminal and run.last_event_seq <= self.last_seq:
            self.done = True

    def dropped(self, exc: httpx.RequestError | None) -> float:
        """Seconds to wait after a lost or closed connection (none if it brought events); raises
        once ``max_retries`` connections in a row brought nothing."""
        if self._progress:
            return 0.0
        if self.failures >= self.retry.max_retries:
            if exc is None:
                raise RunqConnectionError(f"the stream of run {self.run_id} keeps closing without events")
            raise RunqConnectionError(f"the stream of run {self.run_id} failed: {exc!r}") from exc
        self.failures += 1
        return self.retry.delay(self.failures - 1)
