"""What an agent is, what it may raise, and the context the runtime hands it."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

T = TypeVar("T")


class AgentError(Exception):
    """Base of the errors an agent raises to end an attempt; ``code`` lands in ``error_code``."""

    code = "agent_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code:
            self.code = code


class RetryableError(AgentError):
    """The attempt failed but another may succeed: retry with backoff."""

    code = "retryable_error"


class FatalError(AgentError):
    """Retrying cannot help: the run is dead at once."""

    code = "fatal_error"


class BudgetExceeded(FatalError):
    """``max_turns`` or ``max_tool_calls`` is used up, or ``max_tokens`` passed."""

    code = "budget_exceeded"


class DeadlineExceeded(FatalError):
    """The run's ``deadline_s`` has passed."""

    code = "deadline_exceeded"


MAX_WAIT_S = 366 * 86400.0  # the longest timeout_s a wait may ask for


class WaitTimedOut(FatalError):
    """``ctx.wait_for`` was not resumed before its ``timeout_s``; uncaught, the run is dead."""

    code = "wait_timed_out"


class WaitRequested(BaseException):
    """Raised by ``ctx.wait_for`` when the wait has no recorded value yet: the attempt ends
    waiting. A ``BaseException``, so an agent's ``except Exception`` cannot swallow it."""

    def __init__(self, name: str, occurrence: int, payload: Any, timeout_s: float | None) -> None:
        super().__init__(name)
        self.name = name
        self.occurrence = occurrence
        self.payload = payload
        self.timeout_s = timeout_s
MESSAGE_ROLES = frozenset({"system", "user", "assistant", "tool"})


@dataclass(frozen=True, slots=True)
class ThreadView:
    """The conversation a run belongs to, as its attempt started: the messages the thread's
    earlier runs stored, oldest first, in OpenAI chat format ``{role, content, tool_calls?,
    tool_call_id?}``. A run's own messages of an earlier attempt are not in it: they were
    stored with a checkpoint, and the attempt resumes after that checkpoint."""

    id: uuid.UUID
    messages: Sequence[Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class Lease:
    """The attempt's claim, for an agent's own writes to runq's database (a framework's
    checkpoints, app/agents/langgraph/): each must be conditioned on ``run_id`` and
    ``lease_id`` like every worker write (§1), on the worker's bounded ``engine``."""

    engine: AsyncEngine
    run_id: uuid.UUID
    lease_id: uuid.UUID


@runtime_checkable
class RunContext(Protocol):
    """The runtime's side of an agent run (implemented by the worker)."""

    run_id: uuid.UUID
    tenant_id: str
    attempt: int
    input: Mapping[str, Any]
    budget: Mapping[str, Any]
    resume_state: Any
    thread: ThreadView | None  # None for a run without a thread
    lease: Lease | None  # None outside a worker (a test's fake context)

    @property
    def cancelled(self) -> bool: ...

    def raise_if_cancelled(self) -> None: ...

    async def emit(self, type: str, data: Mapping[str, Any]) -> None: ...

    async def checkpoint(self, state: Any) -> None: ...

    async def add_messages(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """Append to the thread's history, stored with the next checkpoint or with the ending
        (done or cancelled): never twice after a retry, never from an attempt that failed first."""

    async def effect(self, key: str, fn: Callable[[], Awaitable[T]]) -> T: ...

    async def wait_for(self, name: str, *, payload: Any = None, timeout_s: float | None = None) -> Any:
        """Wait for input under ``name`` without holding the worker: the value given by
        ``POST /runs/{id}/resume``; :class:`WaitTimedOut` after ``timeout_s``. Checkpoint first:
        the resumed attempt starts from the last checkpoint and calls this again."""

    def count_turn(self) -> None:
        """Count one model turn against ``max_turns`` (raises :class:`BudgetExceeded`)."""

    def count_tool_call(self) -> None:
        """Count one tool call against ``max_tool_calls`` (raises :class:`BudgetExceeded`); it
        is also the run's ``usage.tool_calls``."""

    def record_usage(
        self, *, input_tokens: int = 0, output_tokens: int = 0, model_calls: int = 0, tool_calls: int = 0
    ) -> None:
        """Add to the run's usage; past ``budget.max_tokens`` raises :class:`BudgetExceeded`
        (and the run ends ``dead`` with ``budget_exceeded`` even if the agent catches it)."""

    async def shell(self, command: str, *, timeout_s: float | None = None) -> ShellResult: ...


class ShellResult(Protocol):
    exit_code: int | None
    output: str
    timed_out: bool


class Agent(Protocol):
    """An agent: ``run`` returns the output stored on the run as ``run.completed {output}``."""

    async def run(self, ctx: RunContext) -> Any: ...
