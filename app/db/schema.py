"""The tables, as SQLAlchemy metadata: Alembic's target and the reference for the migrations."""

from __future__ import annotations

import re

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Float,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, UUID

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

NOW = text("now()")
STATUSES = "'pending', 'leased', 'waiting', 'done', 'dead', 'cancelled'"
# Non-terminal, as threads count it (a run in flight holds its thread's turn).
NON_TERMINAL = "status NOT IN ('done', 'dead', 'cancelled')"

# A conversation (docs/threads.md): its runs execute one at a time in creation order
# (``run_count`` hands out their turns) and read and extend ``thread_messages``.
threads = Table(
    "threads",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True, server_default=text("gen_random_uuid()")),
    Column("tenant_id", Text, nullable=False),
    Column("metadata", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("idempotency_key", Text),
    Column("request_hash", Text),
    Column("run_count", BigInteger, nullable=False, server_default="0"),
    Column("message_count", Integer, nullable=False, server_default="0"),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=NOW),
)
Index("ix_threads_tenant_created", threads.c.tenant_id, threads.c.created_at.desc(), threads.c.id.desc())
Index(
    "uq_threads_idempotency",
    threads.c.tenant_id,
    threads.c.idempotency_key,
    unique=True,
    postgresql_where=text("idempotency_key IS NOT NULL"),
)

# The history, ``idx`` from 0 without gaps. ``run_id`` (the run that added a message) has no
# foreign key: retention purges old runs, the conversation stays.
thread_messages = Table(
    "thread_messages",
    metadata,
    Column("thread_id", UUID(as_uuid=True), ForeignKey("threads.id", ondelete="CASCADE"), nullable=False),
    Column("idx", Integer, nullable=False),
    Column("role", Text, nullable=False),
    Column("message", JSONB, nullable=False),  # {role, content, tool_calls?, tool_call_id?}
    Column("run_id", UUID(as_uuid=True)),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    PrimaryKeyConstraint("thread_id", "idx"),
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
    # the target of run_events' composite foreign key
    UniqueConstraint("id", "history_at"),
    # Heartbeats rewrite locked_until every few seconds: room on the page keeps them HOT.
    postgresql_with={"fillfactor": "70"},
)

Index(
    "ix_agent_runs_claim",
    agent_runs.c.queue_rank,
    agent_runs.c.created_at,
    postgresql_where=text("status = 'pending'"),
)
# Leased runs by id (fenced writes) with their tenant (in-flight caps), for the reaper too.
# No index names locked_until, so heartbeat renewals stay HOT updates (docs/schema.md).
Index(
    "ix_agent_runs_leased",
    agent_runs.c.id,
    postgresql_include=["tenant_id"],
    postgresql_where=text("status = 'leased'"),
)
Index(
    "ix_agent_runs_tenant_created",
    agent_runs.c.tenant_id,
    agent_runs.c.created_at.desc(),
    agent_runs.c.id.desc(),
)
Index("ix_agent_runs_created", agent_runs.c.created_at.desc(), agent_runs.c.id.desc())
Index(
    "ix_agent_runs_finished",
    agent_runs.c.finished_at,
    postgresql_where=text("status IN ('done', 'dead', 'cancelled')"),
)
Index(
    "ix_agent_runs_interactive",
    agent_runs.c.created_at,
    postgresql_where=text("on_disconnect = 'cancel' AND status IN ('pending', 'leased', 'waiting')"),
)
# Runs still going, by the partition their events are in: the reaper re-homes those older than
# a day and drops a partition only once none of them is left in it. "history_at IS NOT NULL"
# (always true) keeps the planner from taking it for the claim, whose WHERE does not imply it;
# the reaper's range conditions on history_at do.
UNFINISHED = "status NOT IN ('done', 'dead', 'cancelled') AND history_at IS NOT NULL"
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
# Waiting runs counted for the metrics without reading history (claim and reaper never see them).
Index("ix_agent_runs_waiting", agent_runs.c.updated_at, postgresql_where=text("status = 'waiting'"))
Index(
    "uq_agent_runs_idempotency",
    agent_runs.c.tenant_id,
    agent_runs.c.idempotency_key,
    unique=True,
    postgresql_where=text("idempotency_key IS NOT NULL"),
)

# Partitioned by RANGE (history_at), one partition per UTC day (app/queue/partitions.py), plus a
# default one so that an insert never fails. The primary key must hold the partition key; the
# composite foreign key makes history_at a function of run_id (the run's own value), so
# (run_id, seq, history_at) is unique exactly when (run_id, seq) is.
run_events = Table(
    "run_events",
    metadata,
    Column("run_id", UUID(as_uuid=True), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("type", Text, nullable=False),
    Column("data", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("attempt", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("history_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("run_id", "seq", "history_at"),
    ForeignKeyConstraint(
        ["run_id", "history_at"],
        ["agent_runs.id", "agent_runs.history_at"],
        ondelete="CASCADE",
        onupdate="CASCADE",
    ),
    postgresql_partition_by="RANGE (history_at)",
)
# The partitions of run_events, which the metadata does not list (Alembic leaves them alone).
EVENT_PARTITION = re.compile(r"^run_events_(default|before_\d{8}|\d{8})$")

run_checkpoints = Table(
    "run_checkpoints",
    metadata,
    Column("run_id", UUID(as_uuid=True), ForeignKey("agent_runs.id", ondelete="CASCADE"), primary_key=True),
    Column("state", JSONB, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("event_seq", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
)

run_effects = Table(
    "run_effects",
    metadata,
    Column("run_id", UUID(as_uuid=True), ForeignKey("agent_runs.id", ondelete="CASCADE"), nullable=False),
    Column("key", Text, nullable=False),
    Column("result", JSONB),
    Column("attempt", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    PrimaryKeyConstraint("run_id", "key"),
)

# A run's waits, per name and occurrence (the n-th wait of that name in the run's code), as the
# effect ledger records effects: a resumed attempt's same ctx.wait_for finds its value here.
waitpoints = Table(
    "waitpoints",
    metadata,
    Column("waitpoint_id", UUID(as_uuid=True), primary_key=True),
    Column("run_id", UUID(as_uuid=True), ForeignKey("agent_runs.id", ondelete="CASCADE"), nullable=False),
    Column("name", Text, nullable=False),
    Column("occurrence", Integer, nullable=False),
    Column("payload", JSONB),
    Column("expires_at", DateTime(timezone=True)),
    Column("attempt", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("resumed_at", DateTime(timezone=True)),  # by a value or by its time-out
    Column("value", JSONB),
    Column("timed_out", Boolean, nullable=False, server_default=text("false")),
    Column("cancelled_at", DateTime(timezone=True)),  # the run was cancelled while waiting
    UniqueConstraint("run_id", "name", "occurrence"),
)
# The reaper's time-outs read only open waits.
Index(
    "ix_waitpoints_expires_at",
    waitpoints.c.expires_at,
    postgresql_where=text("resumed_at IS NULL AND cancelled_at IS NULL AND expires_at IS NOT NULL"),
)

run_subscribers = Table(
    "run_subscribers",
    metadata,
    Column("run_id", UUID(as_uuid=True), ForeignKey("agent_runs.id", ondelete="CASCADE"), nullable=False),
    Column("subscriber_id", UUID(as_uuid=True), nullable=False),
    Column("seen_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    PrimaryKeyConstraint("run_id", "subscriber_id"),
)

api_keys = Table(
    "api_keys",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True, server_default=text("gen_random_uuid()")),
    Column("tenant_id", Text, nullable=False),
    Column("key_hash", Text, nullable=False, unique=True),
    Column("prefix", Text, nullable=False),
    Column("is_admin", Boolean, nullable=False, server_default=text("false")),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("revoked_at", DateTime(timezone=True)),
)

tenant_limits = Table(
    "tenant_limits",
    metadata,
    Column("tenant_id", Text, primary_key=True),
    Column("max_inflight", Integer, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    CheckConstraint("max_inflight >= 0", name="max_inflight"),
)

# One row per worker process, upserted by its heartbeat (with the lease renewal), deleted on a
# clean exit and by the reaper once stale; no foreign key from ``agent_runs.locked_by``, since a
# dead worker's leases outlive its row until the reaper returns them.
workers = Table(
    "workers",
    metadata,
    Column("worker_id", Text, primary_key=True),
    Column("host", Text, nullable=False),
    Column("pid", Integer, nullable=False),
    Column("version", Text, nullable=False),
    Column("slots", Integer, nullable=False),
    Column("slots_in_use", Integer, nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("last_beat_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    # the worker's own LISTEN channel: runq_wake_workers() wakes it alone (migration 0012)
    Column("wake_channel", Text),
)

# The webhook outbox: one row per (run, event) a run's webhook asked for, written by a trigger on
# run_events in the transaction of the event itself (docs/webhooks.md). ``id`` is the stable
# ``webhook-id``; ``next_attempt_at`` doubles as the delivery's lease (pushed past the request's
# timeout when a worker takes it), and ``attempts`` fences the taker's result.
DELIVERY_STATUSES = "'pending', 'delivered', 'failed', 'stopped'"
webhook_deliveries = Table(
    "webhook_deliveries",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True, server_default=text("gen_random_uuid()")),
    Column("run_id", UUID(as_uuid=True), ForeignKey("agent_runs.id", ondelete="CASCADE"), nullable=False),
    Column("tenant_id", Text, nullable=False),
    Column("url", Text, nullable=False),
    Column("event_seq", Integer, nullable=False),
    Column("event_type", Text, nullable=False),
    Column("status", Text, nullable=False, server_default="pending"),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("next_attempt_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    # Retries stop once this is RUNQ_WEBHOOK_RETRY_FOR_S old; a redelivery starts it again.
    Column("retry_from", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("last_status_code", Integer),
    Column("last_error", Text),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("delivered_at", DateTime(timezone=True)),
    CheckConstraint(f"status IN ({DELIVERY_STATUSES})", name="status"),
    UniqueConstraint("run_id", "event_seq"),
)
Index(
    "ix_webhook_deliveries_due",
    webhook_deliveries.c.next_attempt_at,
    postgresql_where=text("status = 'pending'"),
)
Index(
    "ix_webhook_deliveries_status_created",
    webhook_deliveries.c.status,
    webhook_deliveries.c.created_at.desc(),
    webhook_deliveries.c.id.desc(),
)

# One signing secret per tenant, encrypted with a key derived from RUNQ_SECRET_KEY (app/signing.py).
# After a rotation the previous one still signs until ``previous_until``.
webhook_secrets = Table(
    "webhook_secrets",
    metadata,
    Column("tenant_id", Text, primary_key=True),
    Column("secret", Text, nullable=False),
    Column("previous", Text),
    Column("previous_until", DateTime(timezone=True)),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("rotated_at", DateTime(timezone=True)),
)

schedules = Table(
    "schedules",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True, server_default=text("gen_random_uuid()")),
    Column("tenant_id", Text, nullable=False),
    Column("cron", Text),
    Column("every_s", Float),
    Column("timezone", Text, nullable=False, server_default="UTC"),
    Column("agent", Text, nullable=False),
    Column("input_json", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("budget_json", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("priority", Integer, nullable=False, server_default="0"),
    Column("max_attempts", Integer, nullable=False),
    Column("thread_id", UUID(as_uuid=True)),
    Column("webhook", JSONB),
    Column("paused", Boolean, nullable=False, server_default=text("false")),
    Column("next_run_at", DateTime(timezone=True), nullable=False),
    Column("last_run_id", UUID(as_uuid=True)),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    CheckConstraint("(cron IS NULL) <> (every_s IS NULL)", name="cron_or_every"),
    CheckConstraint("every_s IS NULL OR every_s >= 1", name="every_s"),
)
Index("ix_schedules_due", schedules.c.next_run_at, postgresql_where=text("NOT paused"))
Index("ix_schedules_tenant_created", schedules.c.tenant_id, schedules.c.created_at.desc(), schedules.c.id.desc())

# What the worker's fenced statements added to runs' usage, per tenant and hour (the same
# statement as the run's own usage): tokens per tenant over 24 h read at most 25 rows a tenant.
tenant_usage_hourly = Table(
    "tenant_usage_hourly",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("hour", DateTime(timezone=True), nullable=False),
    Column("input_tokens", BigInteger, nullable=False, server_default="0"),
    Column("output_tokens", BigInteger, nullable=False, server_default="0"),
    Column("model_calls", BigInteger, nullable=False, server_default="0"),
    Column("tool_calls", BigInteger, nullable=False, server_default="0"),
    PrimaryKeyConstraint("tenant_id", "hour"),
)

# One row a minute from the reaper pass: the queue's depth then and the runs finished in that
# minute, for the operators' charts of the last hour.
queue_samples = Table(
    "queue_samples",
    metadata,
    Column("at", DateTime(timezone=True), primary_key=True),
    Column("pending", Integer, nullable=False),
    Column("leased", Integer, nullable=False),
    Column("finished", Integer, nullable=False),
)

# LangGraph's checkpoints (app/agents/langgraph/saver.py), one row per checkpoint, whole: the
# serialized checkpoint in LangGraph's own typed encoding, its metadata as jsonb for list
# filters. ``run_id`` is the runq run whose lease fenced the write (null for the saver used on
# its own); no foreign key, so the saver also serves graphs run outside runq. Keyed as
# LangGraph keys them; checkpoint ids are time-ordered (uuid6), so newest first is id order.
langgraph_checkpoints = Table(
    "langgraph_checkpoints",
    metadata,
    Column("thread_id", Text, nullable=False),
    Column("checkpoint_ns", Text, nullable=False, server_default=""),
    Column("checkpoint_id", Text, nullable=False),
    Column("parent_checkpoint_id", Text),
    Column("type", Text, nullable=False),
    Column("checkpoint", LargeBinary, nullable=False),
    Column("metadata", JSONB, nullable=False),
    Column("run_id", UUID(as_uuid=True)),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    PrimaryKeyConstraint("thread_id", "checkpoint_ns", "checkpoint_id"),
)

# The pending writes of a checkpoint's tasks (what a retried step does not redo).
langgraph_checkpoint_writes = Table(
    "langgraph_checkpoint_writes",
    metadata,
    Column("thread_id", Text, nullable=False),
    Column("checkpoint_ns", Text, nullable=False, server_default=""),
    Column("checkpoint_id", Text, nullable=False),
    Column("task_id", Text, nullable=False),
    Column("idx", Integer, nullable=False),
    Column("task_path", Text, nullable=False, server_default=""),
    Column("channel", Text, nullable=False),
    Column("type", Text),
    Column("blob", LargeBinary),
    PrimaryKeyConstraint("thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx"),
)
