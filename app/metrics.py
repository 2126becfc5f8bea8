"""Prometheus metrics shared by the API and the worker (prometheus-client, default registry)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

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
EVENTS_APPENDED = Counter("runq_events_appended_total", "Events stored by workers")
QUEUE_DEPTH = Gauge("runq_queue_depth", "Runs by status", ["status"])
OLDEST_PENDING_AGE = Gauge("runq_oldest_pending_age_seconds", "Age of the oldest runnable pending run")
CLAIM_LATENCY = Histogram(
    "runq_claim_seconds", "Duration of one claim statement",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
)
PICKUP_LATENCY = Histogram(
    "runq_pickup_seconds", "From available_at to the claim",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
HEARTBEAT_DURATION = Histogram(
    "runq_heartbeat_seconds", "Duration of one batched lease renewal",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
)
SSE_SUBSCRIBERS = Gauge("runq_sse_subscribers", "Open SSE streams on this API process")
