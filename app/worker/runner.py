"""The worker's run slots: claim up to the free slots in one statement, execute, finish.

Each claimed run becomes an :class:`~app.worker.attempt.Attempt`. How it ended (the agent's
return value or exception, and what stopped it early, if anything) goes through
:func:`~app.worker.decide.decide`, and the ending it names is written by one fenced,
batched statement (``finish_if_leased``); a lost lease writes nothing at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import uuid
from datetime import UTC, datetime

from app import tracing
from app.agents.base import (
    Agent,
    DeadlineExceeded,
    FatalError,
    RetryableError,
    ThreadView,
)
from app.agents.inputs import InvalidInput, check_input
from app.agents.registry import load_agent
from app.backoff import Backoff
from app.domain import Claim, ClaimBatch, Finish, Run, Status
from app.errors import DatabaseUnavailable, LeaseLost
from app.guards.redact import Redactor
from app.logs import log_context
from app.metrics import CLAIM_LATENCY, LEASES_LOST, PICKUP_LATENCY, RUNS_CLAIMED, count_ending
from app.queue import Queue
from app.queue.codec import MAX_DATA_BYTES
from app.worker.attempt import Attempt
from app.worker.decide import AgentEnded, decide
from app.worker.lease import Heartbeat
from app.worker.writer import Writer

log = logging.getLogger(__name__)

# Claims in a row that look again at once after losing runs to concurrent claims.
CONTENDED_RETRIES = 3


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
        max_data_bytes: int = MAX_DATA_BYTES,
    ) -> None:
        self._queue = queue
        self._max_data_bytes = max_data_bytes
        self._writer = Writer(queue)
        self._heartbeat = heartbeat
        self._worker_id = worker_id
        self._concurrency = concurrency
        self._registry = agents
        self._redactor = redactor
        self._poll_s = poll_s
        self._lease_s = lease_s
        self._attempts: dict[uuid.UUID, Attempt] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        # The last claim found fewer runs than it asked for, or none left besides them: a freed
        # slot then waits for a NOTIFY or the poll instead of claiming from an empty queue once
        # per finished run (its ending tells the registry the slot is free, for the wake-ups).
        self._drained = False
        # Wake-ups not yet answered by a claimed run: each stands for at least one run. Two that
        # reach a one-slot worker before its claim (runq_wake_workers picked it twice) or one
        # that arrives during a claim announce runs that claim did not take, so the worker
        # stays undrained and its freed slot claims at once; a claim that finds fewer runs than
        # it asked for answers them all (the queue was empty).
        self._owed = 0
        self._repoll = False  # woken by a freed slot only to set the poll again (_slot_freed)
        self._unclaimed = False  # the last claim took runs and saw others left (ClaimBatch)
        self._claiming = 0  # the limit of the claim in flight
        self._passing = 0  # targeted wake-ups to pass on (wake)
        self._passer: asyncio.Task[None] | None = None
        self._stopping = False
        self._listening = False  # this worker's LISTEN session is up (app/worker/wakeup.py)

    # -- signals from outside --------------------------------------------------------------

    def wake(self, targeted: bool = False) -> None:
        """A new run may be waiting (NOTIFY). Kept while every slot is busy: the slot that frees
        first claims at once (a burst that arrives while the fleet is busy is claimed as the
        workers free up, not at their next poll).

        A ``targeted`` wake-up (``runq_wake_workers`` picked a free slot of ours for the run)
        that finds every free slot promised to earlier wake-ups is passed on to another worker
        with room: two creates picked this worker before its claim marked the slot used, and
        the second run would otherwise wait for one of our runs to end while others sit idle.
        """
        if targeted and self._owed >= self._free_slots():
            self._pass_on()
            return
        self._drained = False
        self._repoll = False
        self._owed += 1
        self._wake.set()

    def _free_slots(self) -> int:
        """Slots neither running a run nor asked for by the claim in flight."""
        return self._concurrency - len(self._tasks) - self._claiming

    def _pass_on(self) -> None:
        self._passing += 1
        if self._passer is None or self._passer.done():
            self._passer = asyncio.create_task(self._pass_wakeups(), name="pass-wakeups")

    async def _pass_wakeups(self) -> None:
        """One statement for the wake-ups gathered meanwhile; a failure leaves them to the
        other workers' polls, as a lost NOTIFY would."""
        while self._passing:
            runs, self._passing = self._passing, 0
            try:
                await self._queue.pass_wakeups(runs)
            except Exception as exc:
                log.warning("could not pass on %d wake-ups: %s", runs, exc,
                            exc_info=not isinstance(exc, DatabaseUnavailable))  # fmt: skip

    def listening(self, up: bool) -> None:
        """The LISTEN session came up or went down: while down, poll at the full rate."""
        self._listening = up

    def cancel_requested(self, run_id: uuid.UUID) -> None:
        execution = self._attempts.get(run_id)
        if execution is not None:
            execution.cancel_requested()

    def stop_claiming(self) -> None:
        self._stopping = True
        self._wake.set()

    # -- the claim loop ---------------------------------------------------------------------

    async def claim_until_stopped(self) -> None:
        backoff = Backoff()
        contended = 0  # claims in a row that lost runs to concurrent claims
        while not self._stopping:
            self._wake.clear()
            free = self._concurrency - len(self._tasks)
            repoll, self._repoll = self._repoll and self._drained, False
            if free > 0 and not repoll:
                owed = self._owed
                self._claiming = free
                try:
                    claims, claimed = await self._claim(free)
                except Exception as exc:
                    self._claiming = 0
                    # An outage is expected and logged in one line; anything else is a bug.
                    wait = backoff.next()
                    log.warning(
                        "claim failed, retrying in %.1f s: %s",
                        wait,
                        exc,
                        exc_info=not isinstance(exc, DatabaseUnavailable),
                    )
                    await self._sleep(wait)
                    continue
                backoff.reset()
                self._claiming = 0
                arrived = self._owed - owed  # during the claim
                emptied = len(claims) < free and not claims.lost  # the queue had no more for us
                self._owed = arrived + (0 if emptied else max(owed - len(claims), 0))
                self._drained = (emptied or not claims.more) and self._owed == 0
                self._unclaimed = claims.unclaimed and not emptied  # else: behind a thread's turn
                for claim in claims:
                    self._start(claim, claimed)
                # A concurrent claim took runs this one saw, maybe the one it was woken for
                # while the run that woke it is newer than this claim's snapshot: look again
                # now, a few times (a lock held longer is no claim's and waits for the poll).
                contended = contended + 1 if claims.lost else 0
                if 0 < contended <= CONTENDED_RETRIES:
                    continue
            await self._sleep(self._poll_interval())

    def _poll_interval(self) -> float:
        """How long to wait for a wake-up before claiming anyway.

        The poll finds what no NOTIFY announced: runs whose ``available_at`` comes (retries
        after a backoff, delayed runs) and wake-ups sent to a worker that could not take them.
        While this worker listens and found the queue empty, the idle workers share that
        duty: each polls every ``poll_s`` times their number (spread at random), so the fleet
        polls about once per ``poll_s`` whatever its size, not once per worker. The number is
        the heartbeat's, so after a burst that kept every worker busy, the workers freeing up
        poll soon (a run no wake-up reached waits about ``poll_s``, not minutes). A worker whose
        last claim took runs and saw others left polls within about ``poll_s`` instead: should
        the wake-ups sent for those have gone astray (to a worker whose claim found its run
        taken), the tail of a burst is claimed by every worker that drained it, each in a poll,
        not by the fleet one run a poll. Its next claim that finds nothing ends that.
        """
        if not (self._listening and self._drained):
            return self._poll_s
        share = 1 if self._unclaimed else max(1, self._heartbeat.idle_workers)
        return self._poll_s * share * random.uniform(0.5, 1.5)

    async def _sleep(self, seconds: float) -> None:
        """Until woken or ``seconds`` pass: polling is the fallback when NOTIFY is lost."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._wake.wait()

    async def _claim(self, limit: int) -> tuple[ClaimBatch, tuple[int, int]]:
        """The claims, with the claim statement's start and end (ns, for their traces)."""
        started = time.perf_counter()
        started_ns = tracing.now_ns()
        claims = await self._queue.claim_batch(worker_id=self._worker_id, limit=limit)
        CLAIM_LATENCY.observe(time.perf_counter() - started)
        claimed = (started_ns, tracing.now_ns())
        if claims:
            RUNS_CLAIMED.inc(len(claims))
            now = datetime.now(UTC)
            for claim in claims:
                PICKUP_LATENCY.observe(max((now - claim.run.available_at).total_seconds(), 0.0))
        return claims, claimed

    def _start(self, claim: Claim, claimed: tuple[int, int]) -> None:
        task = asyncio.create_task(self._execute(claim, claimed), name=f"run-{claim.run.id}")
        self._tasks.add(task)
        task.add_done_callback(self._slot_freed)

    def _slot_freed(self, task: asyncio.Task[None]) -> None:
        """Undrained, the freed slot claims at once. Drained, the poll is only set again: the
        interval in force was chosen while the slot was busy, maybe when the fleet was idle and
        its share long; now it is this idle worker's share of the fleet as it is."""
        self._tasks.discard(task)
        self._repoll = self._drained
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
            for attempt in list(self._attempts.values()):
                attempt.stop("shutdown")
            await asyncio.wait(pending)

    # -- one run ----------------------------------------------------------------------------

    async def _execute(self, claim: Claim, claimed: tuple[int, int]) -> None:
        run = claim.run
        # The attempt's span, in the run's trace (under the request that created it), from the
        # claim on; the claim, model calls and tool calls are spans below it.
        attributes = {"runq.run_id": str(run.id), "runq.tenant_id": run.tenant_id,
                      "runq.agent": run.agent, "runq.attempt": run.attempts}
        with (
            tracing.span("runq.attempt", traceparent=run.traceparent, attributes=attributes, start_ns=claimed[0]) as span,
            log_context(run_id=run.id, tenant_id=run.tenant_id, attempt=run.attempts),
        ):
            tracing.record_span("runq.claim", start_ns=claimed[0], end_ns=claimed[1],
                                attributes={"runq.worker_id": self._worker_id})
            await self._attempt(claim, span)

    async def _attempt(self, claim: Claim, span: tracing.Span) -> None:
        run = claim.run
        attempt = Attempt(
            claim,
            queue=self._queue,
            writer=self._writer,
            redactor=self._redactor,
            loop=asyncio.get_running_loop(),
            max_data_bytes=self._max_data_bytes,
        )
        previous = self._attempts.get(run.id)
        if previous is not None:
            # This worker re-claimed its own run after the lease expired: the older
            # attempt has lost it, even if no heartbeat has said so yet.
            previous.stop("lease_lost")
        self._attempts[run.id] = attempt
        self._heartbeat.hold(run.id, attempt)
        try:
            ended = await self._run_agent(attempt)
            finish = decide(
                ended,
                attempt.stop_reason,
                deadline_message=lambda: _deadline_message(run),
                budget_message=lambda: attempt.usage.budget_message,
                failure=attempt.failure,
            )
            if finish is None:
                LEASES_LOST.inc()
                log.warning("lease lost: run stopped, nothing more written for this attempt")
                return
            if ended.error is not None and finish.error_code == "internal_error":
                log.error("agent raised an unexpected error", exc_info=ended.error)
            span.set_attributes({"runq.ending": finish.ending.value, "runq.error_code": finish.error_code or ""})
            await self._finish(attempt, finish)
        finally:
            attempt.close()
            self._heartbeat.drop(run.id, attempt)
            if self._attempts.get(run.id) is attempt:
                del self._attempts[run.id]

    async def _run_agent(self, attempt: Attempt) -> AgentEnded:
        """How the agent's call ended; an agent that cannot run ends as a fatal error."""
        run = attempt.claim.run
        log.debug("run started (agent %s)", run.agent)
        try:
            agent_class = self._agent_class(run.agent)
        except Exception as exc:  # not registered, or its module does not import
            return AgentEnded(error=FatalError(f"agent {run.agent!r} is not available: {exc}", code="unknown_agent"))
        try:  # checked when the run was created; again here for a run stored before its agent had a schema
            check_input(run.agent, agent_class, run.input)
        except InvalidInput as exc:
            return AgentEnded(error=FatalError(str(exc), code="invalid_input"))
        remaining = _deadline_remaining(run)
        if remaining is not None and remaining <= 0:
            return AgentEnded(error=DeadlineExceeded(_deadline_message(run)))
        if run.thread_id is not None:
            try:
                history = await self._queue.thread_history(run.thread_id, run_id=run.id)
            except DatabaseUnavailable as exc:
                return AgentEnded(error=RetryableError(f"thread history not readable: {exc}", code="database_unavailable"))
            attempt.thread = ThreadView(run.thread_id, history)
        return await attempt.run_agent(agent_class, remaining)

    def _agent_class(self, name: str) -> type[Agent]:
        return load_agent(self._registry[name])  # imported once per process

    async def _finish(self, attempt: Attempt, finish: Finish) -> None:
        """The ending, with the attempt's buffered events. A database outage is waited out for
        up to one lease; after that the reaper owns the run anyway."""
        give_up_at = time.monotonic() + self._lease_s
        backoff = Backoff()
        while True:
            try:
                finished = await attempt.finish(finish)
                break
            except LeaseLost:
                LEASES_LOST.inc()
                log.warning("lease lost before the run's ending was written")
                return
            except DatabaseUnavailable as exc:
                if time.monotonic() + backoff.peek() > give_up_at:
                    log.error("ending not written, leaving the run to the reaper: %s", exc)
                    return
                wait = backoff.next()
                log.warning("ending not written yet, retrying in %.1f s: %s", wait, exc)
                await asyncio.sleep(wait)
            except Exception:  # the writer logged it; the reaper ends the run once its lease expires
                log.error("ending not written, leaving the run to the reaper")
                return
        count_ending(finished)
        # Success is the common case: at debug only (one line per run is a measurable cost).
        log.log(
            logging.DEBUG if finished.status is Status.DONE else logging.INFO,
            "run %s (%s)",
            "retrying" if finished.status is Status.PENDING else finished.status.value,
            finished.error_code or finished.cancel_reason or "ok",
        )


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
