"""Housekeeping every worker runs: expired leases, timed-out waits, abandoned interactive runs,
due schedules, expired LangGraph store items, partitions, retention. Each step goes on its own: a step that fails is logged
and counted (``runq_maintenance_errors_total{step}``), and the steps after it still run.

Every worker runs it; the queue's statements take a transaction-scoped advisory lock, so
one pass acts at a time cluster-wide and a stalled worker never stops the others reaping.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from app.errors import DatabaseUnavailable
from app.metrics import (
    EVENT_PARTITIONS,
    MAINTENANCE_ERRORS,
    REAPER_RESCUES,
    RESUMES,
    RUNS_PURGED,
    SCHEDULE_RUNS,
    WAIT_SECONDS,
    count_ending,
)
from app.queue import Queue

log = logging.getLogger(__name__)


PURGE_BATCH = 500
MIN_SCHEDULE_WAIT_S = 0.2  # a due slot another worker's pass is still firing
PURGE_BATCHES_PER_PASS = 20  # each batch its own short transaction; 10,000 runs a pass at most
HISTORY_EVERY_S = 60.0  # partitions change by the day: a process looks at them once a minute


async def reap_once(queue: Queue, *, retention_s: float, history: bool = True) -> None:
    """One pass: each step on its own, so one that fails (a row it cannot handle is already
    left out, app/queue/rowwise.py) never stops the steps after it."""
    steps: list[tuple[str, Callable[[], Awaitable[object]]]] = [
        ("expired_leases", lambda: _requeue_expired(queue)),
        ("workers", queue.forget_stale_workers),
        ("wait_timeouts", lambda: _time_out_waits(queue)),
        ("abandoned_runs", lambda: _cancel_abandoned(queue)),
        ("schedules", lambda: _fire_schedules(queue)),
        ("store_items", queue.sweep_expired_store_items),
    ]
    if history:
        steps.append(("partitions", lambda: keep_partitions(queue, retention_s=retention_s)))
    if retention_s > 0:
        steps.append(("retention", lambda: purge_past_retention(queue, older_than_s=retention_s)))
    unavailable: DatabaseUnavailable | None = None
    for name, step in steps:
        try:
            await step()
        except DatabaseUnavailable as exc:  # the next steps would fail alike: the pass is over
            unavailable = exc
            break
        except Exception:
            MAINTENANCE_ERRORS.labels(step=name).inc()
            log.exception("reaper step %s failed; the other steps go on", name)
    if unavailable is not None:
        raise unavailable


async def _requeue_expired(queue: Queue) -> None:
    for run in await queue.reap_expired():
        REAPER_RESCUES.labels(outcome=run.status.value).inc()
        if run.is_terminal:  # its worker is gone: nobody else counts this ending
            count_ending(run)
        log.info("expired lease of run %s handled: now %s", run.id, run.status.value)


async def _time_out_waits(queue: Queue) -> None:
    for resumed in await queue.resume_expired_waits():
        RESUMES.labels(outcome="timed_out").inc()
        WAIT_SECONDS.observe(resumed.waited_s)
        log.info("wait %s of run %s timed out: resumed", resumed.waitpoint_id, resumed.run.id)


async def _cancel_abandoned(queue: Queue) -> None:
    for run in await queue.cancel_abandoned():
        if run.is_terminal:  # a pending or waiting run, cancelled here; a leased one by its worker
            count_ending(run)
        log.info("run %s abandoned by its subscribers: cancel requested", run.id)


async def _fire_schedules(queue: Queue) -> None:
    """Due slots as runs; a schedule that cannot fire is parked, reported where it is
    (app/queue/schedules.py), and the others fire."""
    for schedule_id, run_id in (await queue.fire_due_schedules()).runs:
        SCHEDULE_RUNS.inc()
        log.info("schedule %s created run %s", schedule_id, run_id)


async def keep_partitions(queue: Queue, *, retention_s: float) -> None:
    """run_events' day partitions made ahead and, with a retention, dropped once past it
    (app/queue/partitions.py); the runs of dropped days are purged after."""
    for name in await queue.create_event_partitions(today=datetime.now(UTC).date()):
        EVENT_PARTITIONS.labels(change="created").inc()
        log.info("event partition %s created", name)
    if retention_s > 0:
        if moved := await queue.rehome_unfinished():
            log.info("%d runs still going after a day moved their history to today's partition", moved)
        for name in await queue.drop_expired_partitions(older_than_s=retention_s):
            EVENT_PARTITIONS.labels(change="dropped").inc()
            log.info("event partition %s dropped: past retention", name)


async def purge_past_retention(queue: Queue, *, older_than_s: float) -> int:
    """Finished runs past retention whose events are gone, batch by batch, until one comes
    back short: a pass keeps up with a busy cluster, yet no transaction holds many rows."""
    purged = 0
    for _ in range(PURGE_BATCHES_PER_PASS):
        deleted = await queue.purge_finished(older_than_s=older_than_s, batch=PURGE_BATCH)
        purged += deleted
        if deleted < PURGE_BATCH:
            break
    if purged:
        RUNS_PURGED.inc(purged)
        log.info("purged %d finished runs past retention", purged)
    return purged


async def reap_forever(queue: Queue, *, interval_s: float, retention_s: float) -> None:
    history_due = 0.0
    while True:
        # Jitter keeps the workers' passes from colliding on the lock in lockstep.
        delay = interval_s * random.uniform(0.8, 1.2)
        try:
            history = time.monotonic() >= history_due
            await reap_once(queue, retention_s=retention_s, history=history)
            if history:
                history_due = time.monotonic() + HISTORY_EVERY_S
            due_in = await queue.next_schedule_due_in()
            if due_in is not None:  # a schedule's slot comes before the next pass: wake for it
                delay = min(delay, max(due_in, MIN_SCHEDULE_WAIT_S))
        except DatabaseUnavailable as exc:
            log.warning("reaper pass skipped: %s", exc)
        except Exception:
            log.exception("reaper pass failed")
        await asyncio.sleep(delay)
