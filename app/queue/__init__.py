"""The repository layer: every SQL statement that reads or changes runs and their events.

The API, the worker and the CLI all go through :class:`Queue`; nothing else writes runs. The
statements are written out whole in ``app/queue/sql/*.sql`` (loaded by :mod:`app.queue.statements`),
each named after the state change it makes and guarded by the state (and, for a worker, the
claim's ``lease_id``) it expects. Every transition appends its events in the same statement,
so a status and the event that announces it commit together, and ``last_event_seq`` on the
run row hands out gapless sequence numbers under the row lock, in commit order.

Modules by concern: :mod:`~app.queue.runs` (create, read, stop), :mod:`~app.queue.claims`
(claim, heartbeat), :mod:`~app.queue.events` (log, checkpoint, effects, presence),
:mod:`~app.queue.finish` (how an attempt ends, batched), :mod:`~app.queue.maintenance` (reaper),
:mod:`~app.queue.partitions` (run_events by day, retention), :mod:`~app.queue.ops` (admin and metrics), :mod:`~app.queue.webhooks` (the webhook
outbox and signing secrets), :mod:`~app.queue.schedules` (schedules and their slots), :mod:`~app.queue.workers` (the
worker registry), :mod:`~app.queue.threads` (conversations and their multitask strategies),
:mod:`~app.queue.waits` (resuming waiting runs), :mod:`~app.queue.graph_checkpoints` (LangGraph's
checkpoints, for the saver of ``app/agents/langgraph``), :mod:`~app.queue.graph_store` (LangGraph's
store, a tenant's items), :mod:`~app.queue.limits` (tenant limits).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy.ext.asyncio import AsyncEngine

from app.backoff import RetryBackoff
from app.db.errors import database_down
from app.queue.channels import CANCEL as CANCEL_CHANNEL
from app.queue.channels import EVENTS as EVENTS_CHANNEL
from app.queue.channels import RUNS as RUNS_CHANNEL
from app.queue.channels import WEBHOOKS as WEBHOOKS_CHANNEL
from app.queue.claims import CLAIM_BATCH, CLAIM_BATCH_CAPPED, Claims
from app.queue.codec import EncodedEvents, NewEvents, NewMessages, encode, request_hash
from app.queue.events import Appended, Events, Stored
from app.queue.finish import FINISH_IF_LEASED, Ended, Endings
from app.queue.graph_assistants import AssistantFields, GraphAssistants, StoredAssistant
from app.queue.graph_checkpoints import Fence, GraphCheckpoints
from app.queue.graph_store import GraphStore
from app.queue.limits import LIMIT_NAMES, Limits, TenantUse
from app.queue.maintenance import Maintenance
from app.queue.ops import QUEUE_DEPTH, Ops, QueueDepth, QueueSample, QueueStats
from app.queue.partitions import EventPartition, History
from app.queue.runs import NewRun, Runs
from app.queue.schedules import Schedules
from app.queue.store import LimitDefaults
from app.queue.threads import Threads
from app.queue.waits import Recorded, Resumed, Waits
from app.queue.webhooks import DeliveryJob, Webhooks
from app.queue.workers import Workers, WorkerView

if TYPE_CHECKING:
    from app.settings import Settings

__all__ = [
    "CANCEL_CHANNEL",
    "CLAIM_BATCH",
    "CLAIM_BATCH_CAPPED",
    "EVENTS_CHANNEL",
    "FINISH_IF_LEASED",
    "LIMIT_NAMES",
    "QUEUE_DEPTH",
    "RUNS_CHANNEL",
    "WEBHOOKS_CHANNEL",
    "Appended",
    "AssistantFields",
    "DeliveryJob",
    "EncodedEvents",
    "Ended",
    "EventPartition",
    "Fence",
    "GraphCheckpoints",
    "LimitDefaults",
    "NewEvents",
    "NewMessages",
    "NewRun",
    "Queue",
    "QueueDepth",
    "QueueSample",
    "QueueStats",
    "Recorded",
    "Resumed",
    "Stored",
    "StoredAssistant",
    "TenantUse",
    "WorkerView",
    "database_down",
    "encode",
    "request_hash",
]


class Queue(
    Threads, Runs, Claims, Events, Endings, Maintenance, History, Waits, Ops, Webhooks, Schedules, Workers, Limits,
    GraphStore, GraphAssistants,
):
    """The queue's operations; each method is one short transaction on its own connection."""

    @classmethod
    def from_settings(
        cls, engine: AsyncEngine, settings: Settings, *, claim_engine: AsyncEngine | None = None
    ) -> Queue:
        """The queue as configured by ``RUNQ_*`` (the API, the worker and the CLI)."""
        return cls(
            engine,
            claim_engine=claim_engine,
            lease_s=settings.lease_s,
            retry=RetryBackoff(settings.retry_base_s, settings.retry_max_s),
            priority_aging_s=settings.priority_aging_s,
            tenant_max_inflight=settings.tenant_max_inflight,
            presence_ttl_s=settings.presence_ttl_s,
            limits=LimitDefaults(
                create_per_s=settings.tenant_create_per_s,
                create_burst=settings.tenant_create_burst,
                max_pending=settings.tenant_max_pending,
                max_streams=settings.tenant_max_streams,
                max_inflight=settings.tenant_max_inflight,
                max_schedules=settings.tenant_max_schedules,
            ),
        )
