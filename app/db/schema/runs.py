"""The run: its row, what the claim, the reaper and the lists read it by."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    Table,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, UUID

from app.db.schema.base import (
    NON_TERMINAL,
    NOW,
    STATUSES,
    metadata,
    newest_first_index,
    unique_per_tenant,
)

agent_runs = Table(
    "agent_runs",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True, server_default=text("gen_random_uuid()")),
    Column("tenant_id", Text, nullable=False),
    Column("agent", Text, nullable=False),
    Column("status", Text, nullable=False, server_default="pending"),
    Column("priority", Integer, nullable=False, server_default="0"),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("max_attempts", Integer, nullable=False),
    Column("available_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    # available_at minus priority x aging: one ascending key gives "priority first, FIFO
    # within a priority" and lets waiting runs overtake, so one index serves the claim.
    Column("queue_rank", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("locked_until", DateTime(timezone=True)),
    Column("locked_by", Text),
    Column("lease_id", UUID(as_uuid=True)),
    Column("leased_at", DateTime(timezone=True)),
    Column("heartbeat_at", DateTime(timezone=True)),
    Column("cancel_requested_at", DateTime(timezone=True)),
    Column("cancel_reason", Text),
    Column("budget_json", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("input_json", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("output", JSONB),
    Column("error_code", Text),
    Column("error_message", Text),
    Column("idempotency_key", Text),
    Column("request_hash", Text),
    Column("on_disconnect", Text, nullable=False, server_default="continue"),
    Column("disconnect_grace_s", Float, nullable=False, server_default="30"),
    Column("detached_at", DateTime(timezone=True)),
    Column("last_event_seq", Integer, nullable=False, server_default="0"),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("finished_at", DateTime(timezone=True)),
    Column("webhook", JSONB),  # {url, events} as validated at create (docs/webhooks.md)
    Column("schedule_id", UUID(as_uuid=True)),  # the schedule that created the run, if any
    # The day partition of run_events that holds this run's events (docs/schema.md): its
    # creation time, moved to now() by the reaper while the run is still going a day later.
    Column("history_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("thread_id", UUID(as_uuid=True), ForeignKey("threads.id", ondelete="CASCADE")),
    # the run's place among its thread's runs, handed out under the thread's row lock
    Column("thread_turn", BigInteger),
    # {input_tokens, output_tokens, model_calls, tool_calls} over all attempts (docs/usage.md)
    Column("usage", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("traceparent", Text),  # W3C trace context of the request that created the run
    # the open waitpoint as run JSON shows it, null unless waiting (docs/waits.md)
    Column("waitpoint", JSONB),
    # claims that ended in a wait: attempts - wait_count is what max_attempts counts
    Column("wait_count", Integer, nullable=False, server_default="0"),
    CheckConstraint(f"status IN ({STATUSES})", name="status"),
    CheckConstraint("on_disconnect IN ('continue', 'cancel')", name="on_disconnect"),
    # Heartbeats rewrite locked_until every few seconds: room on the page keeps them HOT.
    postgresql_with={"fillfactor": "70"},
)

Index(
    "ix_agent_runs_claim",
    agent_runs.c.queue_rank,
    agent_runs.c.created_at,
    postgresql_where=text("status = 'pending'"),
)
# Leased runs by id (fenced writes) with their tenant (in-flight caps), for the reaper too, and
# for the lists and the re-homing, whose indexes below leave leased runs out.
# No index names locked_until, so heartbeat renewals stay HOT updates (docs/schema.md).
Index(
    "ix_agent_runs_leased",
    agent_runs.c.id,
    postgresql_include=["tenant_id"],
    postgresql_where=text("status = 'leased'"),
)
# A claim (pending -> leased) is never a HOT update, status being in index predicates, and it
# adds an entry to every index whose predicate the leased row meets: these three leave leased
# runs out, so it adds two (the primary key, ix_agent_runs_leased), not five. Leased runs are
# few (at most the fleet's run slots); what reads these reads them through ix_agent_runs_leased.
NOT_LEASED = "status <> 'leased'"
newest_first_index("ix_agent_runs_tenant_created", agent_runs, agent_runs.c.tenant_id, where=NOT_LEASED)
newest_first_index("ix_agent_runs_created", agent_runs, where=NOT_LEASED)
Index(
    "ix_agent_runs_finished",
    agent_runs.c.finished_at,
    postgresql_where=text("status IN ('done', 'dead', 'cancelled')"),
)
Index(
    "ix_agent_runs_interactive",
    agent_runs.c.created_at,
    postgresql_where=text(
        "on_disconnect = 'cancel' AND status IN ('pending', 'leased', 'waiting')"
    ),
)
# Runs still going, by the partition their events are in: the reaper re-homes those older than
# a day and drops a partition only once none of them is left in it (leased ones: above, through
# ix_agent_runs_leased). "history_at IS NOT NULL" (always true) keeps the planner from taking it
# for the claim, whose WHERE does not imply it; the reaper's range conditions on history_at do.
UNFINISHED = "status NOT IN ('done', 'dead', 'cancelled', 'leased') AND history_at IS NOT NULL"
Index("ix_agent_runs_unfinished", agent_runs.c.history_at, postgresql_where=text(UNFINISHED))
# A thread's runs by turn (its run list, its last run, the cascade of a thread's deletion).
Index(
    "ix_agent_runs_thread_turn",
    agent_runs.c.thread_id,
    agent_runs.c.thread_turn,
    postgresql_where=text("thread_id IS NOT NULL"),
)
# The claim's turn check: only the runs of threads still in flight, never a thread's history.
Index(
    "ix_agent_runs_thread_inflight",
    agent_runs.c.thread_id,
    agent_runs.c.thread_turn,
    postgresql_where=text(f"thread_id IS NOT NULL AND {NON_TERMINAL}"),
)
# A tenant's queued runs (pending or waiting), counted against its max_pending (docs/limits.md).
# "tenant_id IS NOT NULL" (always true) keeps the claim, which names no tenant, off it.
TENANT_QUEUED = "status IN ('pending', 'waiting') AND tenant_id IS NOT NULL"
Index(
    "ix_agent_runs_tenant_queued",
    agent_runs.c.tenant_id,
    postgresql_where=text(TENANT_QUEUED),
)
# Waiting runs counted for the metrics without reading history (claim and reaper never see them).
Index("ix_agent_runs_waiting", agent_runs.c.updated_at, postgresql_where=text("status = 'waiting'"))
unique_per_tenant("uq_agent_runs_idempotency", agent_runs, agent_runs.c.idempotency_key)


def run_id_column(**options: Any) -> Column[Any]:
    """A record's ``run_id``: the run it belongs to, deleted with it."""
    return Column("run_id", UUID(as_uuid=True), ForeignKey("agent_runs.id", ondelete="CASCADE"), **options)
