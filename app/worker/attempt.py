"""One attempt of one claimed run: the context its agent sees, what stops it, and its writes.

All of an attempt's state is here, in one object, because two threads touch it: the event
loop runs the agent and writes, the heartbeat thread reports a lost lease or a cancel and
kills the run's tools at once, even while an agent blocks the loop.

Every write goes to the worker's :class:`~app.worker.writer.Writer` fenced by the claim's
lease, and through the redactor. Checkpoints also carry the budget counters, so ``max_turns``
and ``max_tool_calls`` hold over the whole run, not per attempt, and how many waits of each name
the agent had passed (docs/waits.md), so a resumed attempt's ``wait_for`` finds the same
occurrence: the agent sees only its own state as ``resume_state``. Usage (tokens, model and
tool calls) rides the same statements: what the attempt consumed since its last checkpoint goes
with the next one or with the ending, a waiting one too.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from app.agents.base import (
    MAX_WAIT_S,
    MESSAGE_ROLES,
    Agent,
    BudgetExceeded,
    Lease,
    ThreadView,
    WaitRequested,
    WaitTimedOut,
)
from app.domain import Claim, Finish, Finished, Usage, Wait
from app.errors import DatabaseUnavailable, LeaseLost
from app.guards.redact import Redactor
from app.metrics import EVENTS_APPENDED
from app.queue import Queue
from app.tools.shell import ProcessGroups, ShellResult, run_shell
from app.worker.decide import AgentEnded, StopReason
from app.worker.events import BackgroundTake, EventBuffer, PendingEvent, Take, Written
from app.worker.usage import UsageMeter
from app.worker.writer import Writer

T = TypeVar("T")

MAX_ERROR_MESSAGE = 2000
MAX_MESSAGE_CHARS = 100_000  # as the API's limit on a thread run's prompt
_LIMITS = {"turns": "max_turns", "tool_calls": "max_tool_calls"}

log = logging.getLogger(__name__)


class Attempt:
    """A :class:`~app.agents.base.RunContext` for the agent and a lease holder for the heartbeat."""

    def __init__(
        self,
        claim: Claim,
        *,
        queue: Queue,
        writer: Writer,
        redactor: Redactor,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        run = claim.run
        self.claim = claim
        self.run_id = run.id
        self.tenant_id = run.tenant_id
        self.attempt = run.attempts
        self.input: Mapping[str, Any] = run.input
        self.budget: Mapping[str, Any] = run.budget
        saved = claim.resume_state if isinstance(claim.resume_state, dict) else {}
        self.resume_state: Any = saved.get("state")
        self.counts = {name: int(saved.get(name, 0)) for name in _LIMITS}
        max_tokens = run.budget.get("max_tokens")
        self.usage = UsageMeter(
            run.usage, tenant_id=run.tenant_id, max_tokens=None if max_tokens is None else int(max_tokens)
        )
        self._waits: dict[str, int] = dict(saved.get("waits") or {})  # name -> waits passed
        self._stored: dict[str, Any] = saved  # the checkpoint a resumed attempt would start from
        self.lease_id = claim.lease_id
        self.lease: Lease | None = Lease(queue.engine, run.id, claim.lease_id)
        self.thread: ThreadView | None = None  # set by the runner for a run in a thread
        # added by the agent, not stored yet: they go with the next checkpoint or the ending
        self._unsaved_messages: list[dict[str, Any]] = []
        self.groups = ProcessGroups()
        self.stop_reason: StopReason | None = None
        self.events = EventBuffer(self._append_in_background)
        self._queue = queue
        self._writer = writer
        self._redactor = redactor
        self._loop = loop
        self._lock = threading.Lock()
        self._cancelled = False
        self._task: asyncio.Task[Any] | None = None  # the run's task while its agent runs
        self._closed = False

    # -- what stops it (heartbeat thread, LISTEN, the runner) ---------------------------------

    def lease_lost(self) -> None:
        """Heartbeat thread: kill the tools now, even if the event loop is blocked."""
        self._mark_stopped("lease_lost")
        self._loop.call_soon_threadsafe(self._cancel_task)

    def cancel_requested(self) -> None:
        """Heartbeat thread or LISTEN: the same as a lost lease, but the run then ends cancelled."""
        if self._cancelled:
            return
        self._mark_stopped("cancel")
        self._loop.call_soon_threadsafe(self._cancel_task)

    def stop(self, reason: StopReason) -> None:
        """Event loop only."""
        self._mark_stopped(reason)
        self._cancel_task()

    def _mark_stopped(self, reason: StopReason) -> None:
        # The reason is recorded before the agent can see ``cancelled``: an agent that raises
        # on it at once must still end as cancelled, not as a failure.
        with self._lock:
            if self.stop_reason is None or reason == "lease_lost":  # a lost lease overrides all
                self.stop_reason = reason
        self._cancelled = True  # a plain flag, read by agents that poll it
        self.groups.kill_all()

    def _cancel_task(self) -> None:
        if not self._closed and self._task is not None:
            self._task.cancel()

    # -- the runner's side ------------------------------------------------------------------

    async def run_agent(self, agent_class: type[Agent], remaining_s: float | None) -> AgentEnded:
        """Run the agent in the run's own task (a second task per run costs more than a no-op run).

        While it runs, a stop cancels this task; once it has returned, a late stop cancels
        nothing and the ending is written whole.
        """
        if self.stop_reason is not None:  # a cancel may have arrived before the agent started
            return AgentEnded(cancelled=True)
        task = asyncio.current_task()
        assert task is not None
        deadline = None if remaining_s is None else self._loop.call_later(remaining_s, self.stop, "deadline")
        self._task = task
        try:
            return AgentEnded(value=await agent_class().run(self))
        except WaitRequested as wait:
            return AgentEnded(wait=self._wait(wait))
        except asyncio.CancelledError:
            if self.stop_reason is None and task.cancelling():
                raise  # not a stop of this run: the worker itself is being torn down
            while task.cancelling():
                task.uncancel()
            return AgentEnded(cancelled=True)
        except Exception as exc:
            return AgentEnded(error=exc)
        finally:
            self._task = None
            if deadline is not None:
                deadline.cancel()

    async def finish(self, finish: Finish) -> Finished:
        """Write the attempt's ending with every event still buffered, once the agent is done
        (nothing cancels it any more); :class:`LeaseLost` if the claim is no longer ours."""
        finish = self._clean(finish)
        usage = self.usage.unstored
        finished = await self.events.flush_final(
            lambda take: self._write(
                lambda redacted: self._writer.finish(
                    run_id=self.run_id,
                    lease_id=self.lease_id,
                    finish=finish,
                    take=redacted,
                    messages=tuple(self._unsaved_messages),  # read under the buffer's lock
                    usage=usage,
                ),
                take,
            )
        )
        self.usage.written(usage)
        return finished

    def close(self) -> None:
        """The attempt is over: no task to cancel, no tool left running, no timer pending."""
        self._closed = True
        self.groups.kill_all()
        self.events.close()

    def _clean(self, finish: Finish) -> Finish:
        output = self._redactor.data(finish.output) if finish.output is not None else None
        message = finish.error_message
        if message is not None:
            message = self._redactor.text(message)
            if len(message) > MAX_ERROR_MESSAGE:
                message = message[: MAX_ERROR_MESSAGE - 1] + "…"
        # the constructor, not dataclasses.replace: a third of this function's time, every run
        return Finish(finish.ending, output, finish.error_code, message, finish.wait)

    # -- the agent's side: cancellation -----------------------------------------------------

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def raise_if_cancelled(self) -> None:
        if self._cancelled:
            raise asyncio.CancelledError("the run was asked to stop")

    # -- events and checkpoints -------------------------------------------------------------

    async def emit(self, type: str, data: Mapping[str, Any]) -> None:
        if type.startswith("run."):
            raise ValueError(f"{type!r}: run.* events are written by the runtime")
        self.events.add(type, data)

    async def checkpoint(self, state: Any) -> None:
        """Store ``state`` with the events before it; waits out a database outage (the events
        stay buffered meanwhile), so a checkpoint never fails the attempt."""
        stored = {"state": state, **self.counts, "waits": dict(self._waits)}

        async def store(take: Take) -> None:
            # Under the buffer's lock, in a shielded task: the messages and usage written are
            # forgotten here, even when the agent is cancelled meanwhile, so no ending writes
            # them again.
            messages, usage = tuple(self._unsaved_messages), self.usage.unstored
            await self._append(take, state=stored, messages=messages, usage=usage)
            del self._unsaved_messages[: len(messages)]
            self.usage.written(usage)

        while True:
            try:
                await self.events.flush_with(store)
                self._stored = stored
                return
            except DatabaseUnavailable as exc:  # the writer's next tick retries, later under load
                log.debug("checkpoint not stored yet: %s", exc)

    async def add_messages(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """Append to the thread's history with the next checkpoint (or the ending), redacted."""
        if self.thread is None:
            raise ValueError("add_messages needs a run in a thread")
        checked = []
        for message in messages:
            if not isinstance(message, Mapping) or message.get("role") not in MESSAGE_ROLES:
                raise ValueError(f"a thread message needs a role of {sorted(MESSAGE_ROLES)}")
            content = message.get("content")
            if isinstance(content, str) and len(content) > MAX_MESSAGE_CHARS:
                raise ValueError(f"a thread message may hold at most {MAX_MESSAGE_CHARS} characters")
            checked.append(self._redactor.data(dict(message)))
        self._unsaved_messages.extend(checked)

    async def _append(
        self,
        take: Take,
        *,
        state: Any = None,
        messages: Sequence[Mapping[str, Any]] = (),
        usage: Usage | None = None,
    ) -> None:
        await self._write(
            lambda redacted: self._writer.append(
                run_id=self.run_id,
                lease_id=self.lease_id,
                take=redacted,
                state=state,
                messages=messages,
                usage=usage,
            ),
            take,
        )

    async def _write(self, write: Callable[[Take], Awaitable[T]], take: Take) -> T:
        """Every write of this attempt but the background ones: its events redacted when the
        statement takes them; a lost lease stops the attempt."""
        count = 0

        def redacted() -> list[PendingEvent]:
            nonlocal count
            events = self._redacted(take())
            count = len(events)
            return events

        try:
            result = await write(redacted)
        except LeaseLost:
            self.stop("lease_lost")
            raise
        EVENTS_APPENDED.inc(count)
        return result

    def _append_in_background(self, take: BackgroundTake, written: Written) -> None:
        """:meth:`_write` of the buffer's events alone, handed to the writer without waiting."""
        count = 0

        def redacted() -> list[PendingEvent] | None:
            nonlocal count
            events = take()
            if events is None:
                return None
            count = len(events)
            return self._redacted(events)

        def done(outcome: int | BaseException) -> None:
            if isinstance(outcome, LeaseLost):
                self.stop("lease_lost")
            if isinstance(outcome, BaseException):
                written(outcome)
                return
            EVENTS_APPENDED.inc(count)
            written(None)

        self._writer.append_in_background(
            run_id=self.run_id, lease_id=self.lease_id, take=redacted, done=done
        )

    def _redacted(self, events: list[PendingEvent]) -> list[PendingEvent]:
        return [(type, self._redactor.data(data)) for type, data in events]

    # -- waits -----------------------------------------------------------------------------

    async def wait_for(self, name: str, *, payload: Any = None, timeout_s: float | None = None) -> Any:
        """The recorded value of this wait (the same name and occurrence, as effects are keyed),
        or end the attempt waiting for it."""
        if not name:
            raise ValueError("a wait needs a name")
        if timeout_s is not None and not 0 <= timeout_s <= MAX_WAIT_S:  # NaN too
            raise ValueError(f"timeout_s must be between 0 and {MAX_WAIT_S:g} seconds")
        json.dumps(payload)  # a payload that cannot be stored fails here, not in the batched ending
        occurrence = self._waits.get(name, 0) + 1
        self._waits[name] = occurrence
        recorded = await self._queue.find_waitpoint(run_id=self.run_id, name=name, occurrence=occurrence)
        if recorded is None:
            raise WaitRequested(name, occurrence, payload, timeout_s)
        if recorded.timed_out:
            raise WaitTimedOut(f"the wait {name!r} timed out")
        return recorded.value

    def _wait(self, wait: WaitRequested) -> Wait:
        """The waiting ending, with the checkpoint the resumed attempt starts from: the last one
        stored, whole (state, budget counters, waits passed), since the resumed attempt runs the
        agent's code after it again and counts what it counts again."""
        return Wait(
            name=wait.name,
            occurrence=wait.occurrence,
            payload=self._redactor.data(wait.payload),
            timeout_s=wait.timeout_s,
            checkpoint={"state": None, **self._stored},
        )

    # -- effects, tools, budget -------------------------------------------------------------

    async def effect(self, key: str, fn: Callable[[], Awaitable[T]]) -> T:
        found, result = await self._queue.find_effect(run_id=self.run_id, key=key)
        if found:
            return result  # type: ignore[no-any-return]
        result = await fn()
        await self._writer.record_effect(run_id=self.run_id, lease_id=self.lease_id, key=key, result=result)
        return result

    async def shell(self, command: str, *, timeout_s: float | None = None) -> ShellResult:
        self.raise_if_cancelled()
        result = await run_shell(command, groups=self.groups, timeout_s=timeout_s, redactor=self._redactor)
        # Killed because the run is stopping: not a result for the agent to act on.
        self.raise_if_cancelled()
        return result

    def count_turn(self) -> None:
        self._count("turns")

    def count_tool_call(self) -> None:
        self._count("tool_calls")
        self.usage.add(Usage(tool_calls=1))

    def record_usage(
        self, *, input_tokens: int = 0, output_tokens: int = 0, model_calls: int = 0, tool_calls: int = 0
    ) -> None:
        """Add what a model call (or a tool) consumed. Past ``budget.max_tokens`` the run stops
        at once (its tools are killed, ``cancelled`` turns true) and ends dead with
        ``budget_exceeded``, whatever the agent does with the exception raised here."""
        self.usage.add(Usage(input_tokens, output_tokens, model_calls, tool_calls))
        if self.usage.over_budget:
            self._mark_stopped("budget")
            raise BudgetExceeded(self.usage.budget_message)

    def _count(self, name: str) -> None:
        self.counts[name] += 1
        limit = self.budget.get(_LIMITS[name])
        if limit is not None and self.counts[name] > int(limit):
            raise BudgetExceeded(f"{_LIMITS[name]} of {limit} used up")
