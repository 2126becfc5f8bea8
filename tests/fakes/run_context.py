"""An in-memory :class:`~app.agents.base.RunContext` for unit-testing agents without a worker."""

from __future__ import annotations

import asyncio
import copy
import os
import signal
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from app.agents.base import BudgetExceeded, ThreadView, WaitRequested, WaitTimedOut

T = TypeVar("T")

TIMED_OUT = object()  # a wait's recorded outcome when the reaper timed it out


@dataclass(frozen=True)
class ShellResult:
    exit_code: int | None
    output: str
    timed_out: bool


class FakeRunContext:
    """Records events, checkpoints, effects and waits; the ledger and the recorded waits survive
    into :meth:`retry` and :meth:`resume`, and the waits passed are kept with each checkpoint
    (as the worker's attempt does), so a resumed attempt asks for the same occurrence."""

    def __init__(
        self,
        input: Mapping[str, Any],
        *,
        budget: Mapping[str, Any] | None = None,
        attempt: int = 1,
        resume_state: Any = None,
        effects: dict[str, Any] | None = None,
        thread: ThreadView | None = None,
        waits: dict[tuple[str, int], Any] | None = None,
        passed: dict[str, int] | None = None,
    ) -> None:
        self.run_id = uuid.uuid4()
        self.tenant_id = "t1"
        self.attempt = attempt
        self.input = input
        self.budget = budget or {}
        self.resume_state = resume_state
        self.thread = thread
        self.lease = None  # no database: an agent's own fenced writes need a worker
        self.messages: list[dict[str, Any]] = []  # what add_messages was given, in order
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.checkpoints: list[Any] = []
        self.effects = effects if effects is not None else {}
        self.waits = waits if waits is not None else {}  # (name, occurrence) -> value
        self.passed = dict(passed or {})  # name -> waits passed, as of the resume state
        self.asked: list[WaitRequested] = []
        self._stored_passed = dict(self.passed)
        self.turns = 0
        self.tool_calls = 0
        self.usage = dict.fromkeys(("input_tokens", "output_tokens", "model_calls", "tool_calls"), 0)
        self._cancelled = False

    def retry(self) -> FakeRunContext:
        """The next attempt: resumes from the last checkpoint, shares the effect ledger."""
        state = self.checkpoints[-1] if self.checkpoints else self.resume_state
        return FakeRunContext(
            self.input,
            budget=self.budget,
            attempt=self.attempt + 1,
            resume_state=state,
            effects=self.effects,
            thread=self.thread,
            waits=self.waits,
            passed=self._stored_passed,
        )

    def resume(self, value: Any) -> FakeRunContext:
        """The attempt after ``POST …/resume``: the last wait asked gets ``value``."""
        wait = self.asked[-1]
        self.waits[(wait.name, wait.occurrence)] = value
        return self.retry()

    def of_type(self, type: str) -> list[dict[str, Any]]:
        return [data for t, data in self.events if t == type]

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        self._cancelled = True

    def raise_if_cancelled(self) -> None:
        if self._cancelled:
            raise asyncio.CancelledError

    async def emit(self, type: str, data: Mapping[str, Any]) -> None:
        self.events.append((type, copy.deepcopy(dict(data))))

    async def checkpoint(self, state: Any) -> None:
        self.checkpoints.append(copy.deepcopy(state))
        self._stored_passed = dict(self.passed)

    async def wait_for(self, name: str, *, payload: Any = None, timeout_s: float | None = None) -> Any:
        occurrence = self.passed.get(name, 0) + 1
        self.passed[name] = occurrence
        if (name, occurrence) not in self.waits:
            wait = WaitRequested(name, occurrence, copy.deepcopy(payload), timeout_s)
            self.asked.append(wait)
            raise wait
        value = self.waits[(name, occurrence)]
        if value is TIMED_OUT:
            raise WaitTimedOut(f"the wait {name!r} timed out")
        return value

    async def add_messages(self, messages: Any) -> None:
        self.messages.extend(copy.deepcopy([dict(m) for m in messages]))

    async def effect(self, key: str, fn: Callable[[], Awaitable[T]]) -> T:
        if key not in self.effects:
            before = dict(self.passed)
            self.effects[key] = await fn()
            for name, n in self.passed.items():  # the waits passed inside fn go with the record
                self._stored_passed[name] = self._stored_passed.get(name, 0) + n - before.get(name, 0)
        return self.effects[key]  # type: ignore[no-any-return]

    def count_turn(self) -> None:
        self.turns += 1
        if self.turns > self.budget.get("max_turns", float("inf")):
            raise BudgetExceeded("max_turns used up")

    def count_tool_call(self) -> None:
        self.tool_calls += 1
        if self.tool_calls > self.budget.get("max_tool_calls", float("inf")):
            raise BudgetExceeded("max_tool_calls used up")

    def record_usage(
        self, *, input_tokens: int = 0, output_tokens: int = 0, model_calls: int = 0, tool_calls: int = 0
    ) -> None:
        for name, value in (("input_tokens", input_tokens), ("output_tokens", output_tokens),
                            ("model_calls", model_calls), ("tool_calls", tool_calls)):
            self.usage[name] += value
        if self.usage["input_tokens"] + self.usage["output_tokens"] > self.budget.get("max_tokens", float("inf")):
            raise BudgetExceeded("max_tokens passed")

    async def shell(self, command: str, *, timeout_s: float | None = None) -> ShellResult:
        proc = await asyncio.create_subprocess_shell(
            command,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
        except (TimeoutError, asyncio.CancelledError) as exc:
            os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            if isinstance(exc, asyncio.CancelledError):
                raise
            return ShellResult(exit_code=None, output="", timed_out=True)
        return ShellResult(
            exit_code=proc.returncode, output=out.decode(errors="replace"), timed_out=False
        )
