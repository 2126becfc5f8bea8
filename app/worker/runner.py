"""The worker's run slots: claim up to the free slots in one statement, execute, finish.

Each claimed run becomes an :class:`Execution`: its context, its agent task and, once
something stops it early, the reason. The outcome maps onto exactly one fenced statement:

- a return value → ``complete``; ``FatalError`` (budget, deadline included) → ``bury``;
  ``RetryableError`` or any unexpected exception → ``retry_or_bury``;
- a cancel request → ``finalize_cancel``; shutdown → ``release`` (pending, available now);
- a lost lease → nothing at all: the claim belongs to someone else now.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from app.agents.base import Agent, AgentError, DeadlineExceeded, FatalError, load_agent
from app.domain import Claim, DatabaseUnavailable, LeaseLost, Outcome, Run, Status
from app.logs import log_context
from app.metrics import (
    CLAIM_LATENCY,
    LEASES_LOST,
    PICKUP_LATENCY,
    RUNS_CANCELLED,
    RUNS_CLAIMED,
    RUNS_FINISHED,
    RUNS_RETRIED,
)
from app.queue import Queue
from app.redact import Redactor
from app.tools.shell import ProcessGroups
from app.worker.completions import CompletionBatcher
from app.worker.context import Statement, WorkerContext
from app.worker.lease import Heartbeat

StopReason = Literal["cancel", "lease_lost", "shutdown", "deadline"]

MAX_ERROR_MESSAGE = 2000
_MIN_BACKOFF_S = 0.1
_MAX_BACKOFF_S = 5.0

log = logging.getLogger(__name__)


class Execution:
    """One claimed run on this worker."""

    def __init__(
        self, claim: Claim, *, queue: Queue, redactor: Redactor, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.claim = claim
        self.groups = ProcessGroups()
        self.ctx = WorkerContext(
            claim=claim,
            queue=queue,
            groups=self.groups,
            redactor=redactor,
            on_lease_lost=lambda: self.stop("lease_lost"),
        )
        self.task: asyncio.Task[Any] | None = None  # the run's task while its agent runs
        self.stop_reason: StopReason | None = None
        self.finished = False
        self._loop = loop
        self._lock = threading.Lock()

    @property
    def lease_id(self) -> uuid.UUID:
        return self.claim.lease_id

    def lease_lost(self) -> None:
        """Heartbeat thread: kill the tools now, even if the event loop is blocked."""
        self._mark_stopped("lease_lost")
        self._loop.call_soon_threadsafe(self._cancel_task)

    def cancel_requested(self) -> None:
        """Heartbeat thread or LISTEN: the same as a lost lease, but the run then ends cancelled."""
        if self.ctx.cancelled:
            return
        self._mark_stopped("cancel")
        self._loop.call_soon_threadsafe(self._cancel_task)

    def stop(self, reason: StopReason) -> None:
        """Event loop only."""
        self._mark_stopped(reason)
        self._cancel_task()

    def _mark_stopped(self, reason: StopReason) -> None:
        # The reason is recorded before the agent can see ``ctx.cancelled``: an agent that
        # raises on it at once must still end as cancelled, not as a failure.
        with self._lock:
            if self.stop_reason is None or reason == "lease_lost":  # a lost lease overrides all
                self.stop_reason = reason
        self.ctx.mark_cancelled()
        self.groups.kill_all()

    def _cancel_task(self) -> None:
        if not self.finished and self.task is not None:
            self.task.cancel()


class Runner:
    """Claims runs into ``concurrency`` slots and drives each to exactly one outcome."""

    def __init__(
        self,
        *,
        queue: Queue,
        heartbeat: Heartbeat,
        worker_id: str,
        concurrency: int,
        agents: dict[str, str],
        redactor: Redactor,
        poll_s: float,
        lease_s: float,
    ) -> None:
        self._queue = queue
        self._completions = CompletionBatcher(queue)
        self._heartbeat = heartbeat
        self._worker_id = worker_id
        self._concurrency = concurrency
        self._registry = agents
        self._agents: dict[str, type[Agent]] = {}
        self._redactor = redactor
        self._poll_s = poll_s
        self._lease_s = lease_s
        self._executions: dict[uuid.UUID, Execution] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        # The last claim found fewer runs than it asked for: a freed slot then waits for a
        # NOTIFY or the poll instead of claiming from an empty queue once per finished run.
        self._drained = False
        self._stopping = False

    # -- signals from outside --------------------------------------------------------------

    def wake(self) -> None:
        """A new run may be waiting (NOTIFY)."""
        self._drained = False
        self._wake.set()

    def cancel_requested(self, run_id: uuid.UUID) -> None:
        execution = self._executions.get(run_id)
        if execution is not None:
            execution.cancel_requested()

    def stop_claiming(self) -> None:
        self._stopping = True
        self._wake.set()

    # -- the claim loop ---------------------------------------------------------------------

    async def claim_until_stopped(self) -> None:
        backoff = _MIN_BACKOFF_S
        while not self._stopping:
            self._wake.clear()
            free = self._concurrency - len(self._tasks)
            if free > 0:
                try:
                    claims = await self._claim(free)
                except Exception as exc:
                    # An outage is expected and logged in one line; anything else is a bug.
                    log.warning(
                        "claim failed, retrying in %.1f s: %s",
                        backoff,
                        exc,
                        exc_info=not isinstance(exc, DatabaseUnavailable),
                    )
                    await self._sleep(backoff)
                    backoff = min(backoff * 2, _MAX_BACKOFF_S)
                    continue
                backoff = _MIN_BACKOFF_S
                self._drained = len(claims) < free
                for claim in claims:
                    self._start(claim)
            await self._sleep(self._poll_s)

    async def _sleep(self, seconds: float) -> None:
        """Until woken or ``seconds`` pass: polling is the fallback when NOTIFY is lost."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._wake.wait()

    async def _claim(self, limit: int) -> list[Claim]:
        started = time.perf_counter()
        claims = await self._queue.claim_batch(worker_id=self._worker_id, limit=limit)
        CLAIM_LATENCY.observe(time.perf_counter() - started)
        if claims:
            RUNS_CLAIMED.inc(len(claims))
            now = datetime.now(UTC)
            for claim in claims:
                PICKUP_LATENCY.observe(max((now - claim.run.available_at).total_seconds(), 0.0))
        return claims

    def _start(self, claim: Claim) -> None:
        task = asyncio.create_task(self._execute(claim), name=f"run-{claim.run.id}")
        self._tasks.add(task)
        task.add_done_callback(self._slot_freed)

    def _slot_freed(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not self._drained:
            self._wake.set()
        if not task.cancelled() and task.exception() is not None:
            log.error("run slot crashed", exc_info=task.exception())

    # -- shutdown ---------------------------------------------------------------------------

    async def drain(self, grace_s: float) -> None:
        """Let running runs finish within ``grace_s``; then stop the rest and release them."""
        if not self._tasks:
            return
        log.info("shutting down: waiting up to %.1f s for %d runs", grace_s, len(self._tasks))
        if grace_s > 0:
            await asyncio.wait(set(self._tasks), timeout=grace_s)
        pending = {task for task in self._tasks if not task.done()}
        if pending:
            log.info("releasing %d runs still running after the grace period", len(pending))
            for execution in list(self._executions.values()):
                execution.stop("shutdown")
            await asyncio.wait(pending)

    # -- one run ----------------------------------------------------------------------------

    async def _execute(self, claim: Claim) -> None:
        run = claim.run
        with log_context(run_id=run.id, tenant_id=run.tenant_id, attempt=run.attempts):
            execution = Execution(
                claim, queue=self._queue, redactor=self._redactor, loop=asyncio.get_running_loop()
            )
            previous = self._executions.get(run.id)
            if previous is not None:
                # This worker re-claimed its own run after the lease expired: the older
                # attempt has lost it, even if no heartbeat has said so yet.
                previous.stop("lease_lost")
            self._executions[run.id] = execution
            self._heartbeat.hold(run.id, execution)
            try:
                await self._run(execution)
            finally:
                execution.finished = True
                execution.groups.kill_all()
                execution.ctx.events.close()
                self._heartbeat.drop(run.id, execution)
                if self._executions.get(run.id) is execution:
                    del self._executions[run.id]

    async def _run(self, execution: Execution) -> None:
        run = execution.claim.run
        log.debug("run started (agent %s)", run.agent)
        try:
            agent_class = self._agent_class(run.agent)
        except Exception as exc:  # not registered, or its module does not import
            await self._bury(
                execution, "unknown_agent", f"agent {run.agent!r} is not available: {exc}"
            )
            return
        remaining = _deadline_remaining(run)
        if remaining is not None and remaining <= 0:
            await self._bury(execution, DeadlineExceeded.code, _deadline_message(run))
            return
        await self._settle(execution, await _invoke(agent_class, execution, remaining))

    def _agent_class(self, name: str) -> type[Agent]:
        if name not in self._agents:
            self._agents[name] = load_agent(self._registry[name])
        return self._agents[name]

    async def _settle(self, execution: Execution, ended: AgentEnded) -> None:
        """Write the one statement that ends this attempt."""
        run, error = execution.claim.run, ended.error
        failed = ended.cancelled or error is not None
        reason = execution.stop_reason
        if reason == "lease_lost" or isinstance(error, LeaseLost):
            LEASES_LOST.inc()
            log.warning("lease lost: run stopped, nothing more written for this attempt")
            return
        if failed and reason == "cancel":
            await self._finish(
                execution,
                lambda events: self._queue.finalize_cancel(
                    run_id=run.id, lease_id=execution.lease_id, events=events
                ),
            )
        elif failed and reason == "shutdown":
            await self._finish(
                execution,
                lambda events: self._queue.release(
                    run_id=run.id, lease_id=execution.lease_id, events=events
                ),
            )
        elif failed and reason == "deadline":
            await self._bury(execution, DeadlineExceeded.code, _deadline_message(run))
        elif not failed:
            output = self._redactor.data(ended.value)
            await self._finish(
                execution,
                lambda events: self._completions.complete(
                    run_id=run.id, lease_id=execution.lease_id, output=output, events=events
                ),
            )
        elif isinstance(error, FatalError):
            await self._bury(execution, error.code, str(error))
        elif isinstance(error, AgentError):
            await self._retry(execution, error.code, str(error))
        elif isinstance(error, DatabaseUnavailable):
            await self._retry(execution, "database_unavailable", str(error))
        elif error is None:
            await self._retry(execution, "internal_error", "the agent's task was cancelled")
        else:
            log.error("agent raised an unexpected error", exc_info=error)
            await self._retry(execution, "internal_error", f"{type(error).__name__}: {error}")

    async def _bury(self, execution: Execution, code: str, message: str) -> None:
        await self._fail(execution, code, message, write=self._queue.bury)

    async def _retry(self, execution: Execution, code: str, message: str) -> None:
        await self._fail(execution, code, message, write=self._queue.retry_or_bury)

    async def _fail(
        self, execution: Execution, code: str, message: str, *, write: Callable[..., Awaitable[Outcome]]
    ) -> None:
        """End the attempt as failed through ``write`` (``bury`` or ``retry_or_bury``)."""
        message = self._error_message(message)
        await self._finish(
            execution,
            lambda events: write(
                run_id=execution.claim.run.id,
                lease_id=execution.lease_id,
                error_code=code,
                error_message=message,
                events=events,
            ),
        )

    def _error_message(self, message: str) -> str:
        message = self._redactor.text(message)
        return (
            message if len(message) <= MAX_ERROR_MESSAGE else message[: MAX_ERROR_MESSAGE - 1] + "…"
        )

    async def _finish(self, execution: Execution, statement: Statement[Outcome]) -> None:
        """The final statement, with the attempt's buffered events. A database outage is waited
        out for up to one lease; after that the reaper owns the run anyway."""
        give_up_at = time.monotonic() + self._lease_s
        backoff = _MIN_BACKOFF_S
        while True:
            try:
                outcome = await execution.ctx.write_final(statement)
                break
            except LeaseLost:
                LEASES_LOST.inc()
                log.warning("lease lost before the run's outcome was written")
                return
            except DatabaseUnavailable as exc:
                if time.monotonic() + backoff > give_up_at:
                    log.error("outcome not written, leaving the run to the reaper: %s", exc)
                    return
                log.warning("outcome not written yet, retrying in %.1f s: %s", backoff, exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF_S)
        _count_outcome(outcome)
        # Success is the common case: at debug only (one line per run is a measurable cost).
        log.log(
            logging.DEBUG if outcome.status is Status.DONE else logging.INFO,
            "run %s (%s)",
            "retrying" if outcome.status is Status.PENDING else outcome.status.value,
            outcome.error_code or outcome.cancel_reason or "ok",
        )


@dataclass(frozen=True, slots=True)
class AgentEnded:
    """How the agent's call ended: its return value, its exception, or cancelled."""

    value: Any = None
    error: Exception | None = None
    cancelled: bool = False


async def _invoke(agent_class: type[Agent], execution: Execution, remaining: float | None) -> AgentEnded:
    """Run the agent in the run's own task (a second task per run costs more than a no-op run).

    While it runs, ``execution.task`` is this task, so a stop cancels the agent; once it has
    returned, a late stop cancels nothing and the outcome is written whole.
    """
    if execution.stop_reason is not None:  # a cancel may have arrived before the agent started
        return AgentEnded(cancelled=True)
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    deadline = None if remaining is None else loop.call_later(remaining, execution.stop, "deadline")
    execution.task = task
    try:
        return AgentEnded(value=await agent_class().run(execution.ctx))
    except asyncio.CancelledError:
        if execution.stop_reason is None and task.cancelling():
            raise  # not a stop of this run: the worker itself is being torn down
        while task.cancelling():
            task.uncancel()
        return AgentEnded(cancelled=True)
    except Exception as exc:
        return AgentEnded(error=exc)
    finally:
        execution.task = None
        if deadline is not None:
            deadline.cancel()


def _deadline_remaining(run: Run) -> float | None:
    """Seconds left of ``budget.deadline_s``, counted from the run's creation (all attempts,
    backoff and queueing included: a deadline is the caller's, not the worker's)."""
    deadline_s = run.budget.get("deadline_s")
    if deadline_s is None:
        return None
    elapsed = (datetime.now(UTC) - run.created_at).total_seconds()
    return float(deadline_s) - elapsed


def _deadline_message(run: Run) -> str:
    return f"deadline_s of {run.budget.get('deadline_s')} s passed"


def _count_outcome(outcome: Outcome) -> None:
    if outcome.status is Status.PENDING:
        RUNS_RETRIED.inc()
        return
    RUNS_FINISHED.labels(status=outcome.status.value).inc()
    if outcome.status is Status.CANCELLED:
        RUNS_CANCELLED.labels(reason=outcome.cancel_reason or "unknown").inc()
