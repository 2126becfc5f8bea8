"""Housekeeping every worker runs: expired leases, abandoned interactive runs, retention.

Every worker runs it; the queue's statements take a transaction-scoped advisory lock, so
one pass acts at a time cluster-wide and a stalled worker never stops the others reaping.
"""

from __future__ import annotations

import asyncio
import logging
import random

from app.domain import DatabaseUnavailable
from app.metrics import REAPER_RESCUES
from app.queue import Queue

log = logging.getLogger(__name__)


async def reap_once(queue: Queue, *, retention_s: float) -> None:
    for run in await queue.reap_expired():
        REAPER_RESCUES.labels(outcome=run.status.value).inc()
        log.info("expired lease of run %s handled: now %s", run.id, run.status.value)
    for run in await queue.cancel_abandoned():
        log.info("run %s abandoned by its subscribers: cancel requested", run.id)
    if retention_s > 0:
        purged = await queue.purge_finished(older_than_s=retention_s)
        if purged:
            log.info("purged %d finished runs past retention", purged)


async def reap_forever(queue: Queue, *, interval_s: float, retention_s: float) -> None:
    while True:
        try:
            await reap_once(queue, retention_s=retention_s)
        except DatabaseUnavailable as exc:
            log.warning("reaper pass skipped: %s", exc)
        except Exception:
            log.exception("reaper pass failed")
        # Jitter keeps the workers' passes from colliding on the lock in lockstep.
        await asyncio.sleep(interval_s * random.uniform(0.8, 1.2))
