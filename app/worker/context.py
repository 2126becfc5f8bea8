"""The :class:`~app.agents.base.RunContext` the worker hands an agent for one attempt.

Every write goes through the queue fenced by the claim's lease, and through the redactor.
Checkpoints also carry the budget counters, so ``max_turns`` and ``max_tool_calls`` hold over
the whole run, not per attempt: the agent sees only its own state as ``resume_state``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from app.agents.base import BudgetExceeded
from app.domain import Claim, LeaseLost
from app.metrics import EVENTS_APPENDED
from app.queue import Queue
from app.redact import Redactor
from app.tools.shell import ProcessGroups, ShellResult, run_shell
from app.worker.events import EventBuffer, PendingEvent

T = TypeVar("T")
Statement = Callable[[list[PendingEvent]], Awaitable[T]]  # a fenced write, given the buffered events

log = logging.getLogger(__name__)

_LIMITS = {"turns": "max_turns", "tool_calls": "max_tool_calls"}


class WorkerContext:
    """One attempt of one run, as its agent sees it."""

    def __init__(
        self,
        *,
        claim: Claim,
        queue: Queue,
        groups: ProcessGroups,
        redactor: Redactor,
        on_lease_lost: Callable[[], None],
    ) -> None:
        run = claim.run
        self.run_id = run.id
        self.tenant_id = run.tenant_id
        self.attempt = run.attempts
        self.input: Mapping[str, Any] = run.input
        self.budget: Mapping[str, Any] = run.budget
        saved = claim.resume_state if isinstance(claim.resume_state, dict) else {}
        self.resume_state: Any = saved.get("state")
        self.usage = {name: int(saved.get(name, 0)) for name in _LIMITS}
        self._lease_id = claim.lease_id
        self._queue = queue
        self._groups = groups
        self._redactor = redactor
        self._on_lease_lost = on_lease_lost
        self._cancelled = False
        self.events = EventBuffer(self._append, on_background_error=self._background_error)

    # -- cancellation ---------------------------------------------------------------------

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def mark_cancelled(self) -> None:
        """Set from the heartbeat thread too: a plain flag, read by agents that poll it."""
        self._cancelled = True

    def raise_if_cancelled(self) -> None:
        if self._cancelled:
            raise asyncio.CancelledError("the run was asked to stop")

    # -- events and checkpoints -----------------------------------------------------------

    async def emit(self, type: str, data: Mapping[str, Any]) -> None:
        if type.startswith("run."):
            raise ValueError(f"{type!r}: run.* events are written by the runtime")
        await self.events.add(type, data)

    async def checkpoint(self, state: Any) -> None:
        stored = {"state": state, **self.usage}
        await self.write_with(
            lambda events: self._queue.save_checkpoint(
                run_id=self.run_id, lease_id=self._lease_id, state=stored, events=events
            )
        )

    async def write_with(self, statement: Statement[T]) -> T:
        """Run a fenced statement together with every buffered event, in one transaction."""
        return await self.events.flush_with(lambda events: self._fenced(statement, events))

    async def write_final(self, statement: Statement[T]) -> T:
        """:meth:`write_with` for the statement that ends the attempt, once the agent is done."""
        return await self.events.flush_final(lambda events: self._fenced(statement, events))

    async def _append(self, events: list[PendingEvent]) -> None:
        if not events:  # a concurrent flush took them
            return
        await self._fenced(
            lambda redacted: self._queue.append_events(
                run_id=self.run_id, lease_id=self._lease_id, events=redacted
            ),
            events,
        )

    async def _fenced(self, statement: Statement[T], events: list[PendingEvent]) -> T:
        redacted = [(type, self._redactor.data(data)) for type, data in events]
        try:
            run = await statement(redacted)
        except LeaseLost:
            self._on_lease_lost()
            raise
        EVENTS_APPENDED.inc(len(redacted))
        return run

    def _background_error(self, exc: BaseException) -> None:
        if isinstance(exc, LeaseLost):
            return  # _fenced has already stopped the run
        log.warning("buffered events not written yet: %s", exc)

    # -- effects, tools, budget -----------------------------------------------------------

    async def effect(self, key: str, fn: Callable[[], Awaitable[T]]) -> T:
        found, result = await self._queue.find_effect(run_id=self.run_id, key=key)
        if found:
            return result  # type: ignore[no-any-return]
        result = await fn()
        await self._queue.record_effect(
            run_id=self.run_id, lease_id=self._lease_id, key=key, result=result
        )
        return result

    async def shell(self, command: str, *, timeout_s: float | None = None) -> ShellResult:
        self.raise_if_cancelled()
        result = await run_shell(
            command, groups=self._groups, timeout_s=timeout_s, redactor=self._redactor
        )
        # Killed because the run is stopping: not a result for the agent to act on.
        self.raise_if_cancelled()
        return result

    def count_turn(self) -> None:
        self._count("turns")

    def count_tool_call(self) -> None:
        self._count("tool_calls")

    def _count(self, name: str) -> None:
        self.usage[name] += 1
        limit = self.budget.get(_LIMITS[name])
        if limit is not None and self.usage[name] > int(limit):
            raise BudgetExceeded(f"{_LIMITS[name]} of {limit} used up")
