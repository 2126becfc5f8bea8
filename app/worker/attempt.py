"""One attempt of one claimed run: the context its agent sees and its writes (what stops it:
app/worker/stopping.py).

Every write goes to the worker's :class:`~app.worker.writer.Writer` fenced by the claim's
lease. Every value the agent hands over (an event's data, a checkpoint, a thread message, an
effect's record, a wait's payload, the output) is redacted and encoded in the agent's own call
(app/worker/encoding.py), before it joins a batch of other runs' writes: a value that cannot be stored (JSON cannot
hold it, or it is over ``RUNQ_MAX_DATA_BYTES``) fails this run, at once, dead with
``invalid_data``, and no other (docs/reliability.md). Usage (tokens, model and tool calls) rides
the writes that store a step: what the attempt consumed since its last stored write goes with
the next checkpoint, effect record or ending, a waiting one too. The budgets are counted from
it, so ``max_turns``, ``max_tool_calls`` and ``max_tokens`` hold over the whole run, not per
attempt. A checkpoint also holds how many waits of each name the agent had passed
(docs/waits.md), so a resumed attempt's ``wait_for`` finds the same occurrence: the agent sees
only its own state as ``resume_state``.
"""

from __future__ import annotations

import asyncio
import logging
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
from app.domain import Claim, Ending, Finish, Finished, Usage, Wait
from app.errors import DatabaseUnavailable, InvalidData
from app.guards.redact import Redactor
from app.metrics import EVENTS_APPENDED
from app.queue import Appended, EncodedEvents, Ended, Queue, Stored
from app.queue.codec import MAX_DATA_BYTES
from app.tools.shell import ShellResult, run_shell
from app.worker.decide import AgentEnded
from app.worker.encoding import Encoder
from app.worker.events import DELTA, BackgroundTake, EventBuffer, Take, Written
from app.worker.stopping import Stoppable
from app.worker.usage import UsageMeter
from app.worker.writer import Writer

T = TypeVar("T")

MAX_ERROR_MESSAGE = 2000
MAX_MESSAGE_CHARS = 100_000  # as the API's limit on a thread run's prompt

log = logging.getLogger(__name__)


class Attempt(Stoppable):
    """A :class:`~app.agents.base.RunContext` for the agent and a lease holder for the heartbeat."""

    def __init__(
        self,
        claim: Claim,
        *,
        queue: Queue,
        writer: Writer,
        redactor: Redactor,
        loop: asyncio.AbstractEventLoop,
        max_data_bytes: int = MAX_DATA_BYTES,
    ) -> None:
        super().__init__(loop)
        run = claim.run
        self.claim = claim
        self.run_id = run.id
        self.tenant_id = run.tenant_id
        self.attempt = run.attempts
        self.input: Mapping[str, Any] = run.input
        self.budget: Mapping[str, Any] = run.budget
        saved = claim.resume_state if isinstance(claim.resume_state, dict) else {}
        self.resume_state: Any = saved.get("state")
        self.usage = UsageMeter(run.usage, tenant_id=run.tenant_id, budget=run.budget)
        self._waits: dict[str, int] = dict(saved.get("waits") or {})  # name -> waits passed
        # What the run's stored checkpoint holds: the agent's state (as JSON; None: the one the
        # attempt started from) and the waits passed.
        self._stored_state: str | None = None
        self._stored_waits = dict(self._waits)
        self._wait_texts: tuple[str, str] | None = None  # a wait's payload and checkpoint, as JSON
        self._effects: dict[str, Any] | None = None  # the run's effect ledger, read at the first effect
        self.lease_id = claim.lease_id
        self.lease: Lease | None = Lease(queue.engine, run.id, claim.lease_id)
        self.thread: ThreadView | None = None  # set by the runner for a run in a thread
        # added by the agent, not stored yet (JSON): they go with the next checkpoint, effect
        # record or the ending
        self._unsaved_messages: list[str] = []
        self._encoder = Encoder(redactor, limit=max_data_bytes, saved=saved)
        self.events = EventBuffer(
            self._append_in_background, hurry=writer.hurry, max_merged_chars=max_data_bytes // 16
        )
        self._queue = queue
        self._writer = writer
        self._redactor = redactor

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
        finish, output = self._clean(finish)
        wait_payload, wait_state = self._wait_texts if finish.wait is not None and self._wait_texts else (None, None)
        usage = self.usage.unstored

        def ended(events: EncodedEvents) -> Ended:
            return Ended(
                self.run_id, self.lease_id, finish, events,
                messages=tuple(self._unsaved_messages),  # read under the buffer's lock
                usage=usage, output=output, wait_payload=wait_payload, wait_state=wait_state,
            )

        try:
            finished = await self.events.flush_final(
                lambda take: self._write(lambda encoded: self._writer.finish(lambda: ended(encoded())), take)
            )
        except InvalidData as exc:  # PostgreSQL refused what it carried: dead, with none of it
            dead = Finish.dead(InvalidData.code, str(exc))
            finished = await self._writer.finish(lambda: Ended(self.run_id, self.lease_id, dead, usage=usage))
        self.usage.written(usage)
        return finished

    def close(self) -> None:
        """The attempt is over: no task to cancel, no tool left running, no timer pending."""
        self._closed = True
        self.groups.kill_all()
        self.events.close()

    def _clean(self, finish: Finish) -> tuple[Finish, str | None]:
        """The ending as stored (its message redacted and cut) and a done run's output as JSON;
        an output that cannot be stored ends the run dead instead."""
        message = finish.error_message
        if message is not None:
            message = self._redactor.text(message)
            if len(message) > MAX_ERROR_MESSAGE:
                message = message[: MAX_ERROR_MESSAGE - 1] + "…"
        output = None
        if finish.ending is Ending.DONE:
            try:
                output = self._encoder.value(finish.output, what="the output")
            except InvalidData as exc:
                return Finish.dead(InvalidData.code, str(exc)), None
        # the constructor, not dataclasses.replace: a third of this function's time, every run
        return Finish(finish.ending, None, finish.error_code, message, finish.wait), output

    # -- events and checkpoints -------------------------------------------------------------

    async def emit(self, type: str, data: Mapping[str, Any]) -> None:
        if type.startswith("run."):
            raise ValueError(f"{type!r}: run.* events are written by the runtime")
        if type == DELTA:
            try:
                self.events.add(type, self._encoder.delta(data))
            except InvalidData as exc:
                self._write_failed(exc)
                raise
        else:
            self.events.add(type, self._encode(data, what=f"the data of a {type!r} event"))

    async def checkpoint(self, state: Any) -> None:
        """Store ``state`` with the events before it; waits out a database outage (the events
        stay buffered meanwhile), so a checkpoint never fails the attempt."""
        stored = self._encode(state, what="a checkpoint")
        await self._store(state=stored)

    async def add_messages(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """Append to the thread's history with the next checkpoint, effect record or the
        ending, redacted."""
        if self.thread is None:
            raise ValueError("add_messages needs a run in a thread")
        checked = []
        for message in messages:
            if not isinstance(message, Mapping) or message.get("role") not in MESSAGE_ROLES:
                raise ValueError(f"a thread message needs a role of {sorted(MESSAGE_ROLES)}")
            content = message.get("content")
            if isinstance(content, str) and len(content) > MAX_MESSAGE_CHARS:
                raise ValueError(f"a thread message may hold at most {MAX_MESSAGE_CHARS} characters")
            checked.append(self._encode(dict(message), what="a thread message"))
        self._unsaved_messages.extend(checked)

    def _encode(self, value: Any, *, what: str) -> str:
        """``value`` redacted, as the JSON text a statement carries; a value that cannot be
        stored fails the run (:meth:`_write_failed`) and raises :class:`InvalidData` here."""
        try:
            return self._encoder.value(value, what=what)
        except InvalidData as exc:
            self._write_failed(exc)
            raise

    async def _store(
        self,
        *,
        state: str | None = None,
        effects: Sequence[tuple[str, str]] = (),
        waits_inside: Mapping[str, int] | None = None,
    ) -> Stored:
        """One commit of the run's buffered events with a checkpoint (``state``: the agent's, as
        JSON) or effect records, its thread messages and its usage so far, sent at once; waits
        out a database outage (the events stay buffered meanwhile).

        The waits passed go with it as a resumed attempt will count them: a checkpoint stores
        all of them (the agent's code after it runs again and passes the later ones again); an
        effect record adds those passed inside its ``fn`` (``waits_inside``), which a replay of
        the record skips."""

        async def store(take: Take) -> Stored:
            # Under the buffer's lock, in a shielded task: the messages and usage written are
            # forgotten here, even when the agent is cancelled meanwhile, so no ending writes
            # them again.
            messages, usage = tuple(self._unsaved_messages), self.usage.unstored
            waits = dict(self._waits) if state is not None else dict(self._stored_waits)
            for name, passed in (waits_inside or {}).items():
                waits[name] = waits.get(name, 0) + passed
            checkpoint = None
            if state is not None or waits != self._stored_waits:
                checkpoint = self._encoder.checkpoint(self._stored_state if state is None else state, waits)
            stored = await self._write(
                lambda encoded: self._writer.append(
                    lambda: Appended(self.run_id, self.lease_id, encoded(), checkpoint, messages, usage, effects)
                ),
                take,
            )
            del self._unsaved_messages[: len(messages)]
            self.usage.written(usage)
            if state is not None:
                self._stored_state = state
            self._stored_waits = waits
            return stored

        while True:
            try:
                return await self.events.flush_with(store)  # type: ignore[no-any-return]
            except DatabaseUnavailable as exc:  # the writer retries, after a pause
                log.debug("checkpoint not stored yet: %s", exc)

    async def _write(self, write: Callable[[Callable[[], EncodedEvents]], Awaitable[T]], take: Take) -> T:
        """Every write of this attempt but the background ones: its events encoded when the
        statement takes them; a failed write stops the attempt as :meth:`_write_failed` says."""
        count = 0

        def encoded() -> EncodedEvents:
            nonlocal count
            events = self._encoder.events(take())
            count = len(events)
            return events

        try:
            result = await write(encoded)
        except Exception as exc:
            self._write_failed(exc)
            raise
        EVENTS_APPENDED.inc(count)
        return result

    def _append_in_background(self, take: BackgroundTake, written: Written, urgent: bool) -> None:
        """:meth:`_write` of the buffer's events alone, handed to the writer without waiting."""
        count = 0

        def appended() -> Appended | None:
            nonlocal count
            events = take()
            if events is None:
                return None
            encoded = self._encoder.events(events)
            count = len(encoded)
            return Appended(self.run_id, self.lease_id, encoded)

        def done(outcome: Stored | BaseException) -> None:
            if isinstance(outcome, BaseException):
                self._write_failed(outcome)
                written(outcome)
                return
            EVENTS_APPENDED.inc(count)
            written(None)

        self._writer.append_in_background(appended, done, urgent=urgent)

    # -- waits -----------------------------------------------------------------------------

    async def wait_for(self, name: str, *, payload: Any = None, timeout_s: float | None = None) -> Any:
        """The recorded value of this wait (the same name and occurrence, as effects are keyed),
        or end the attempt waiting for it."""
        if not name:
            raise ValueError("a wait needs a name")
        if timeout_s is not None and not 0 <= timeout_s <= MAX_WAIT_S:  # NaN too
            raise ValueError(f"timeout_s must be between 0 and {MAX_WAIT_S:g} seconds")
        stored_payload = self._encode(payload, what=f"the payload of the wait {name!r}")
        occurrence = self._waits.get(name, 0) + 1
        self._waits[name] = occurrence
        recorded = await self._queue.find_waitpoint(run_id=self.run_id, name=name, occurrence=occurrence)
        if recorded is None:
            # The checkpoint the resumed attempt starts from: the last one stored, whole (state,
            # waits passed), since the resumed attempt runs the agent's code after it again.
            self._wait_texts = (stored_payload, self._encoder.checkpoint(self._stored_state, self._stored_waits))
            raise WaitRequested(name, occurrence, payload, timeout_s)
        if recorded.timed_out:
            raise WaitTimedOut(f"the wait {name!r} timed out")
        return recorded.value

    def _wait(self, wait: WaitRequested) -> Wait:
        """The waiting ending (its payload and checkpoint were encoded by :meth:`wait_for`)."""
        return Wait(name=wait.name, occurrence=wait.occurrence, payload=None, timeout_s=wait.timeout_s)

    # -- effects, tools, budget -------------------------------------------------------------

    async def effect(self, key: str, fn: Callable[[], Awaitable[T]]) -> T:
        """``fn``'s result, recorded in the run's effect ledger before it is returned; ``fn``
        runs only when no attempt recorded ``key``. The record, the events buffered by then,
        the thread messages and the usage go in one commit, sent at once (a durable step)."""
        if self._effects is None:
            self._effects = await self._queue.effects_of(self.run_id)
        if key in self._effects:
            return self._effects[key]  # type: ignore[no-any-return]
        before = dict(self._waits)
        result = await fn()
        try:  # as it is: a replay must return what the live step returned, so not redacted
            record = self._encoder.value(result, what=f"the record of effect {key!r}", redact=False)
        except InvalidData as exc:
            self._write_failed(exc)
            raise
        inside = {name: n - before.get(name, 0) for name, n in self._waits.items() if n != before.get(name, 0)}
        stored = await self._store(effects=[(key, record)], waits_inside=inside)
        kept = stored.kept.get(key, result)  # an earlier record of the key wins over this one
        self._effects[key] = kept
        return kept  # type: ignore[no-any-return]

    async def shell(self, command: str, *, timeout_s: float | None = None) -> ShellResult:
        self.raise_if_cancelled()
        result = await run_shell(command, groups=self.groups, timeout_s=timeout_s, redactor=self._redactor)
        # Killed because the run is stopping: not a result for the agent to act on.
        self.raise_if_cancelled()
        return result

    def count_turn(self) -> None:
        self.usage.count_turn()

    def count_tool_call(self) -> None:
        self.usage.count_tool_call()

    def record_usage(
        self, *, input_tokens: int = 0, output_tokens: int = 0, model_calls: int = 0, tool_calls: int = 0
    ) -> None:
        """Add what a model call (or a tool) consumed. Past ``budget.max_tokens`` the run stops
        at once (its tools are killed, ``cancelled`` turns true) and ends dead with
        ``budget_exceeded``, whatever the agent does with the exception raised here."""
        self.usage.record(Usage(*(int(n) for n in (input_tokens, output_tokens, model_calls, tool_calls))))
        if self.usage.over_budget:
            self._mark_stopped("budget")
            raise BudgetExceeded(self.usage.budget_message)
