"""Prometheus metrics shared by the API and the worker (prometheus-client, default registry).

Counters and histograms are per process (sum them across processes); the queue gauges
describe the whole cluster and are refreshed from the database by every API process on scrape
(take ``max`` across processes, not ``sum``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from functools import cache
from typing import Protocol

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from app.domain import TERMINAL, Status, Usage
from app.errors import DatabaseUnavailable
from app.queue import Queue, QueueDepth

# counted where the queue skips a row (it cannot import this module, which imports the queue)
from app.queue.rowwise import MAINTENANCE_ERRORS as MAINTENANCE_ERRORS

log = logging.getLogger(__name__)

# One batched statement of the worker's hot path (a claim, a lease renewal): well under a
# millisecond when healthy, so the buckets start there.
STATEMENT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)

RUNS_CREATED = Counter("runq_runs_created_total", "Runs created through the API", ["agent"])
RUNS_CLAIMED = Counter("runq_runs_claimed_total", "Runs claimed by workers")
RUNS_FINISHED = Counter(
    "runq_runs_finished_total", "Runs that reached a terminal status", ["status"]
)
RUNS_CANCELLED = Counter("runq_runs_cancelled_total", "Cancelled runs by reason", ["reason"])
RUNS_RETRIED = Counter("runq_runs_retried_total", "Attempts that ended in a retry")
LEASES_LOST = Counter(
    "runq_leases_lost_total", "Runs stopped because their lease was lost (not failures)"
)
REAPER_RESCUES = Counter(
    "runq_reaper_rescued_total", "Expired leases handled by the reaper", ["outcome"]
)
RUNS_WAITED = Counter("runq_waits_total", "Attempts that ended in a wait for input (docs/waits.md)")
WAIT_SECONDS = Histogram(
    "runq_wait_seconds", "How long a run waited until it was resumed or timed out",
    buckets=(0.1, 1, 5, 30, 60, 300, 900, 3600, 4 * 3600, 86400),
)
RESUMES = Counter(
    "runq_resumes_total", "Resumes of waiting runs by outcome (value, timed_out, not_waiting)", ["outcome"]
)
EVENTS_APPENDED = Counter("runq_events_appended_total", "Events stored by workers")
CLAIM_LATENCY = Histogram(
    "runq_claim_seconds", "Duration of one claim statement",
    buckets=STATEMENT_BUCKETS,
)
PICKUP_LATENCY = Histogram(
    "runq_pickup_seconds", "From available_at to the claim",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
HEARTBEAT_DURATION = Histogram(
    "runq_heartbeat_seconds", "Duration of one batched lease renewal",
    buckets=STATEMENT_BUCKETS,
)
DB_POOL_WAIT = Histogram(
    "runq_db_pool_wait_seconds", "Waits for a free pooled database connection (only checkouts that waited)",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
DB_POOL_TIMEOUTS = Counter(
    "runq_db_pool_timeouts_total", "Checkouts that found no free connection within RUNQ_DB_POOL_TIMEOUT_S"
)
MODEL_POOL_WAIT = Histogram(
    "runq_model_pool_wait_seconds",
    "Waits for a free model HTTP connection (the openai agent's client, only requests that waited)",
    buckets=(0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
SSE_SUBSCRIBERS = Gauge("runq_sse_subscribers", "Open SSE streams on this API process")
LIMITED = Counter(
    "runq_limited_total",
    "Requests refused with 429 at a tenant limit (docs/limits.md): rate, pending or streams",
    ["tenant", "limit"],
)
RUNS_REQUEUED = Counter("runq_runs_requeued_total", "Dead or cancelled runs requeued by an operator")
RUNS_PURGED = Counter(
    "runq_runs_purged_total", "Finished runs (with their events) deleted by retention"
)
EVENT_PARTITIONS = Counter(
    "runq_event_partitions_total", "Day partitions of run_events created ahead or dropped past retention", ["change"]
)
SCHEDULE_RUNS = Counter("runq_schedule_runs_total", "Runs created by schedules (one per slot)")
WEBHOOK_DELIVERIES = Counter(
    "runq_webhook_deliveries_total",
    "Webhook delivery attempts by outcome (delivered, retry, failed, stopped)",
    ["outcome"],
)
WEBHOOK_REQUEST_SECONDS = Histogram(
    "runq_webhook_request_seconds", "Duration of one webhook request, answer or not",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
WEBHOOK_LATENCY = Histogram(
    "runq_webhook_delivery_latency_seconds", "From the event to its delivery's 2xx",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600),
)

# Usage by tenant (never by run: a label per run grows without bound), counted by the worker
# when the statement that stored it commits, so a lost attempt's unstored usage is not counted.
TOKENS = Counter("runq_tokens_total", "Model tokens stored on runs, by tenant and kind (input, output)", ["tenant", "kind"])
MODEL_CALLS = Counter("runq_model_calls_total", "Model calls stored on runs, by tenant", ["tenant"])
TOOL_CALLS = Counter("runq_tool_calls_total", "Tool calls stored on runs, by tenant", ["tenant"])


def count_usage(tenant_id: str, delta: Usage) -> None:
    if delta.input_tokens:
        TOKENS.labels(tenant=tenant_id, kind="input").inc(delta.input_tokens)
    if delta.output_tokens:
        TOKENS.labels(tenant=tenant_id, kind="output").inc(delta.output_tokens)
    if delta.model_calls:
        MODEL_CALLS.labels(tenant=tenant_id).inc(delta.model_calls)
    if delta.tool_calls:
        TOOL_CALLS.labels(tenant=tenant_id).inc(delta.tool_calls)


class _Ended(Protocol):
    @property
    def status(self) -> Status: ...
    @property
    def cancel_reason(self) -> str | None: ...


def count_ending(run: _Ended) -> None:
    """Count a run that a statement of this process just ended: a retry, or a terminal status
    (cancels also by reason), or a wait. Whoever writes the status counts it: worker, reaper or API."""
    if run.status is Status.PENDING:
        RUNS_RETRIED.inc()
    elif run.status is Status.WAITING:
        RUNS_WAITED.inc()
    elif run.status in TERMINAL:
        _finished(run.status).inc()
        if run.status is Status.CANCELLED:
            RUNS_CANCELLED.labels(reason=run.cancel_reason or "unknown").inc()


@cache
def _finished(status: Status) -> Counter:
    """The counter of one terminal status: ``labels`` looks it up under a lock, on every run."""
    return RUNS_FINISHED.labels(status=status.value)


class QueueGauges(Collector):
    """The cluster-wide queue gauges, read from the database when /metrics is scraped.

    A collector rather than plain gauges: it exports nothing until an API process has refreshed
    it, so a worker's metrics port never shows a queue depth or a database state it did not
    measure. Refreshes happen at most once per ``min_interval_s`` (the route needs no key, so
    scrapes must not become a load of their own).
    """

    def __init__(self, *, min_interval_s: float = 1.0, timeout_s: float = 2.0) -> None:
        self._min_interval_s = min_interval_s
        self._timeout_s = timeout_s
        self._refreshed_at = float("-inf")
        self._depth: QueueDepth | None = None
        self._undelivered: tuple[float, int] | None = None
        self._up: bool | None = None

    async def refresh(self, queue: Queue) -> None:
        now = time.monotonic()
        if now - self._refreshed_at < self._min_interval_s:
            return
        self._refreshed_at = now  # before the await: concurrent scrapes do not query again
        try:
            async with asyncio.timeout(self._timeout_s):
                self._depth = await queue.queue_depth()
                self._undelivered = await queue.undelivered()
            self._up = True
        except (DatabaseUnavailable, TimeoutError) as exc:
            log.warning("queue gauges not refreshed: %s", exc)
            self._up = False  # the depth keeps its last value; runq_database_up says it is stale

    def describe(self) -> Iterator[Metric]:
        return iter(self._families(QueueDepth(pending=0, leased=0, oldest_pending_age_s=0.0), (0.0, 0), up=True))

    def collect(self) -> Iterator[Metric]:
        if self._up is None:
            return iter(())
        return iter(self._families(self._depth, self._undelivered, up=self._up))

    @staticmethod
    def _families(depth: QueueDepth | None, undelivered: tuple[float, int] | None, *, up: bool) -> list[Metric]:
        families: list[Metric] = [
            GaugeMetricFamily(
                "runq_database_up", "1 if the last queue-gauge refresh reached the database", value=int(up)
            )
        ]
        if depth is not None:
            by_status = GaugeMetricFamily(
                "runq_queue_depth", "Runs not finished, by status (pending, leased, waiting)", labels=["status"]
            )
            by_status.add_metric([Status.PENDING.value], depth.pending)
            by_status.add_metric([Status.LEASED.value], depth.leased)
            by_status.add_metric([Status.WAITING.value], depth.waiting)
            families += [
                by_status,
                GaugeMetricFamily(
                    "runq_oldest_pending_age_seconds",
                    "How long the oldest runnable pending run has waited",
                    value=depth.oldest_pending_age_s,
                ),
                GaugeMetricFamily(
                    "runq_thread_runs_waiting_for_turn",
                    "Runs that are due but wait for an earlier run of their thread to end",
                    value=depth.waiting_for_turn,
                ),
            ]
        if undelivered is not None:
            families += [
                GaugeMetricFamily(
                    "runq_webhook_oldest_undelivered_age_seconds",
                    "How long the oldest pending webhook delivery has waited",
                    value=undelivered[0],
                ),
                GaugeMetricFamily(
                    "runq_webhook_pending", "Webhook deliveries not yet delivered, failed or stopped", value=undelivered[1]
                ),
            ]
        return families


QUEUE_GAUGES = QueueGauges()
REGISTRY.register(QUEUE_GAUGES)
