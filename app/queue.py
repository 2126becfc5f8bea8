"""The repository layer: every SQL statement that reads or changes runs and their events.

The API, the worker and the CLI all go through :class:`Queue`; nothing else writes runs. Each
statement is named after the state change it makes and is guarded by the state (and, for a
worker, the claim's ``lease_id``) it expects. Every transition appends its events in the same
statement, so a status and the event that announces it commit together, and ``last_event_seq``
on the run row hands out gapless sequence numbers under the row lock, in commit order.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Row, TextClause, text
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.domain import (
    Claim,
    Completed,
    DatabaseUnavailable,
    Event,
    EventPage,
    IdempotencyConflict,
    LeaseCheck,
    LeaseLost,
    NotRequeueable,
    Run,
    RunFinished,
    RunNotFound,
    Status,
)

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from app.settings import Settings

EVENTS_CHANNEL = "runq_events"  # payload "<run_id>:<last_seq>[,<run_id>:<last_seq>…]": wakes SSE followers
RUNS_CHANNEL = "runq_runs"  # wakes idle workers; never carries work
CANCEL_CHANNEL = "runq_cancel"  # payload "<run_id>": a cancel for a leased run

NewEvents = Sequence[tuple[str, Mapping[str, Any]]]

RUN_COLUMNS = (
    "id, tenant_id, agent, status, priority, attempts, max_attempts, input_json, budget_json,"
    " output, available_at, created_at, updated_at, finished_at, cancel_requested_at,"
    " cancel_reason, error_code, error_message, on_disconnect, disconnect_grace_s,"
    " last_event_seq, locked_by, locked_until"
)
FENCED = "id = :run_id AND lease_id = :lease_id AND status = 'leased'"
CLEAR_LEASE = "lease_id = NULL, locked_by = NULL, locked_until = NULL, leased_at = NULL, heartbeat_at = NULL"
RANK = "make_interval(secs => priority * CAST(:aging_s AS float8))"

# The event that announces a status, derived from the row as it now is, so that every path
# into a status (worker, reaper, API) writes the same terminal or retry event.
OUTCOME_TYPE = (
    "CASE t.status WHEN 'done' THEN 'run.completed' WHEN 'cancelled' THEN 'run.cancelled'"
    " WHEN 'dead' THEN 'run.failed' ELSE 'run.retrying' END"
)
OUTCOME_DATA = (
    "CASE t.status"
    " WHEN 'done' THEN jsonb_build_object('output', t.output)"
    " WHEN 'cancelled' THEN jsonb_build_object('reason', t.cancel_reason)"
    " WHEN 'dead' THEN jsonb_build_object('error_code', t.error_code, 'error_message', t.error_message)"
    " ELSE jsonb_build_object('attempt', t.attempts, 'error_code', t.error_code,"
    " 'available_at', t.available_at) END"
)


def _transition(
    *,
    where: str,
    set_: str,
    outcome: bool = True,
    prelude: str = "",
    from_: str = "",
    checkpoint: bool = False,
    notify_cancel: bool = False,
    notify_runs: bool = False,
) -> TextClause:
    """One UPDATE of runs plus the events it appends (``:types``/``:datas``, then the outcome)."""
    extra = 1 if outcome else 0
    n = "cardinality(CAST(:types AS text[]))"
    final = f" UNION ALL SELECT t.id, t.last_event_seq, {OUTCOME_TYPE}, {OUTCOME_DATA}, t.attempts FROM t" if outcome else ""
    ck = (
        ", ck AS (INSERT INTO run_checkpoints (run_id, state, attempt, event_seq)"
        " SELECT t.id, CAST(:state AS jsonb), t.attempts, t.last_event_seq FROM t"
        " ON CONFLICT (run_id) DO UPDATE SET state = excluded.state, attempt = excluded.attempt,"
        " event_seq = excluded.event_seq, created_at = now() RETURNING run_id)"
        if checkpoint
        else ""
    )
    # Followers are woken only when there is something to read (a checkpoint alone appends
    # nothing, and a hundred streams reading nothing is not free).
    notify = "pg_notify('runq_events', t.id::text || ':' || t.last_event_seq)"
    if not outcome:
        notify = f"(SELECT {notify} WHERE {n} > 0)"
    cancel = ", pg_notify('runq_cancel', t.id::text)" if notify_cancel else ""
    # Runs that are claimable again wake idle workers at once instead of at their next poll.
    cancel += ", pg_notify('runq_runs', '')" if notify_runs else ""
    return text(
        f"WITH {prelude}t AS ("
        f" UPDATE agent_runs SET {set_}, last_event_seq = last_event_seq + {n} + {extra}, updated_at = now()"
        f" {from_} WHERE {where} RETURNING {RUN_COLUMNS}"
        "), ev AS ("
        " INSERT INTO run_events (run_id, seq, type, data, attempt)"
        f" SELECT t.id, t.last_event_seq - {extra} - {n} + e.ord, e.type, e.data, t.attempts"
        " FROM t, unnest(CAST(:types AS text[]), CAST(:datas AS jsonb[])) WITH ORDINALITY AS e(type, data, ord)"
        f"{final} RETURNING run_id)"
        f"{ck}"
        f" SELECT t.*, {notify}{cancel} FROM t"
    )


def _leave_lease(retryable: str, delay: str) -> str:
    """SET clause for a run leaving its lease: back to pending if ``retryable``, else finished.

    A run with a cancel request never goes back to pending (the claim skips such runs, so it
    would wait forever); it ends ``cancelled``.
    """
    again = f"cancel_requested_at IS NULL AND {retryable}"
    return (
        f"status = CASE WHEN {again} THEN 'pending' WHEN cancel_requested_at IS NOT NULL"
        " THEN 'cancelled' ELSE 'dead' END,"
        f" available_at = CASE WHEN {again} THEN now() + {delay} ELSE available_at END,"
        f" queue_rank = CASE WHEN {again} THEN now() + {delay} - {RANK} ELSE queue_rank END,"
        f" finished_at = CASE WHEN {again} THEN NULL ELSE now() END, {CLEAR_LEASE}"
    )


BACKOFF = "make_interval(secs => least(CAST(:retry_max_s AS float8), CAST(:retry_base_s AS float8) * power(2, attempts - 1)))"

ENQUEUE = text(
    "WITH ins AS ("
    " INSERT INTO agent_runs (tenant_id, agent, priority, max_attempts, available_at, queue_rank,"
    " input_json, budget_json, idempotency_key, request_hash, on_disconnect, disconnect_grace_s,"
    " last_event_seq)"
    " VALUES (:tenant_id, :agent, :priority, :max_attempts, now() + make_interval(secs => :delay_s),"
    " now() + make_interval(secs => :delay_s) - make_interval(secs => CAST(:priority AS int) * CAST(:aging_s AS float8)),"
    " CAST(:input AS jsonb), CAST(:budget AS jsonb), :idempotency_key, :request_hash, :on_disconnect,"
    " :disconnect_grace_s, 1)"
    " ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING"
    f" RETURNING {RUN_COLUMNS}"
    "), ev AS ("
    " INSERT INTO run_events (run_id, seq, type, data, attempt)"
    " SELECT id, 1, 'run.queued', '{}'::jsonb, 0 FROM ins RETURNING run_id)"
    " SELECT ins.*, pg_notify('runq_runs', '') FROM ins"
)
# Many runs of one agent in one statement (imports, backfills, the benchmarks): one NOTIFY for
# the whole batch, since idle workers only need waking once.
ENQUEUE_MANY = text(
    "WITH ins AS ("
    " INSERT INTO agent_runs (tenant_id, agent, priority, max_attempts, available_at, queue_rank,"
    " input_json, last_event_seq)"
    " SELECT :tenant_id, :agent, :priority, :max_attempts, now() + make_interval(secs => :delay_s),"
    " now() + make_interval(secs => :delay_s) - make_interval(secs => CAST(:priority AS int) * CAST(:aging_s AS float8)),"
    " i.input, 1"
    " FROM unnest(CAST(:inputs AS jsonb[])) WITH ORDINALITY AS i(input, ord) ORDER BY i.ord"
    " RETURNING id"
    "), ev AS ("
    " INSERT INTO run_events (run_id, seq, type, data, attempt)"
    " SELECT id, 1, 'run.queued', '{}'::jsonb, 0 FROM ins RETURNING run_id)"
    " SELECT (SELECT array_agg(id) FROM ins) AS ids, pg_notify('runq_runs', '')"
)
# Statistics that already count a bulk enqueue's runs when it commits. Without them the planner
# takes the claim's pending set for a row or two and reads and sorts the whole backlog on every
# claim (6 ms instead of 0.7 ms with 20,000 runs pending) until autovacuum's next ANALYZE; run
# in the enqueue's own transaction, ANALYZE counts its uncommitted rows.
ANALYZE_RUNS = text("ANALYZE agent_runs")
BULK_ANALYZE_MIN_RUNS = 1000
ANALYZE_LOCK_TIMEOUT = text("SET LOCAL lock_timeout = '500ms'")  # never wait long on autovacuum

GET_BY_IDEMPOTENCY_KEY = text(
    f"SELECT {RUN_COLUMNS}, request_hash FROM agent_runs"
    " WHERE tenant_id = :tenant_id AND idempotency_key = :idempotency_key"
)
GET_RUN = text(
    f"SELECT {RUN_COLUMNS} FROM agent_runs"
    " WHERE id = :run_id AND (CAST(:tenant_id AS text) IS NULL OR tenant_id = :tenant_id)"
)
LIST_RUNS = text(
    f"SELECT {RUN_COLUMNS} FROM agent_runs"
    " WHERE (CAST(:tenant_id AS text) IS NULL OR tenant_id = :tenant_id)"
    " AND (CAST(:status AS text) IS NULL OR status = :status)"
    " AND (created_at, id) < (:before_at, :before_id)"
    " ORDER BY created_at DESC, id DESC LIMIT :limit"
)

# One NOTIFY per statement for the runs it wrote (their "<run_id>:<last_seq>" joined by commas,
# in payloads that stay under PostgreSQL's 8,000 bytes), not one per run: a notification costs
# the committing backend and every listening session, and per run it was a sixth of the
# machine's CPU in a no-op drain. Referenced from the final SELECT, so that it is evaluated.
_NOTIFY_MANY = (
    ", notified AS MATERIALIZED ("
    " SELECT pg_notify('runq_events', string_agg(n.id::text || ':' || n.last_event_seq, ',')) AS sent"
    " FROM (SELECT id, last_event_seq, (row_number() OVER ()) / 150 AS chunk FROM {rows}) n GROUP BY n.chunk)"
)
_NOTIFIED = "(SELECT count(*) FROM notified) >= 0"

_CLAIM_RETURN = (
    ", claimed AS ("
    " UPDATE agent_runs r SET status = 'leased', attempts = r.attempts + 1, lease_id = gen_random_uuid(),"
    " locked_by = :worker_id, locked_until = now() + make_interval(secs => :lease_s), leased_at = now(),"
    " heartbeat_at = now(), last_event_seq = r.last_event_seq + 1, updated_at = now()"
    f" FROM picked WHERE r.id = picked.id RETURNING r.lease_id, {', '.join('r.' + c.strip() for c in RUN_COLUMNS.split(','))}"
    "), started AS ("
    " INSERT INTO run_events (run_id, seq, type, data, attempt)"
    " SELECT id, last_event_seq, 'run.started', jsonb_build_object('attempt', attempts), attempts"
    " FROM claimed RETURNING run_id)"
    + _NOTIFY_MANY.format(rows="claimed")
    + " SELECT c.*, ck.state AS resume_state"
    f" FROM claimed c LEFT JOIN run_checkpoints ck ON ck.run_id = c.id WHERE {_NOTIFIED}"
)
CLAIM_BATCH = text(
    "WITH picked AS ("
    " SELECT id FROM agent_runs"
    " WHERE status = 'pending' AND available_at <= now() AND cancel_requested_at IS NULL"
    " ORDER BY queue_rank, created_at LIMIT :limit FOR UPDATE SKIP LOCKED)" + _CLAIM_RETURN
)
# With in-flight caps: skip tenants at their cap, and within the candidates take no more of a
# tenant than its remaining room. Capped claims run one at a time (CLAIM_LOCK), so the
# in-flight counts they read are exact.
CLAIM_BATCH_CAPPED = text(
    "WITH inflight AS ("
    " SELECT l.tenant_id, count(*) AS n FROM agent_runs l WHERE l.status = 'leased' GROUP BY l.tenant_id"
    "), caps AS ("
    " SELECT i.tenant_id, i.n, coalesce(tl.max_inflight, :default_cap) AS cap"
    " FROM inflight i LEFT JOIN tenant_limits tl ON tl.tenant_id = i.tenant_id"
    "), candidates AS ("
    " SELECT r.id, r.tenant_id, r.queue_rank, r.created_at FROM agent_runs r"
    " WHERE r.status = 'pending' AND r.available_at <= now() AND r.cancel_requested_at IS NULL"
    " AND NOT EXISTS (SELECT 1 FROM caps WHERE caps.tenant_id = r.tenant_id AND caps.cap > 0 AND caps.n >= caps.cap)"
    " ORDER BY r.queue_rank, r.created_at LIMIT :scan"
    "), ranked AS ("
    " SELECT c.id, c.queue_rank, c.created_at, coalesce(caps.n, 0) AS n,"
    " coalesce(caps.cap, tl.max_inflight, :default_cap) AS cap,"
    " row_number() OVER (PARTITION BY c.tenant_id ORDER BY c.queue_rank, c.created_at) AS k"
    " FROM candidates c LEFT JOIN caps ON caps.tenant_id = c.tenant_id"
    " LEFT JOIN tenant_limits tl ON tl.tenant_id = c.tenant_id"
    "), picked AS ("
    " SELECT r.id FROM agent_runs r JOIN ranked ON ranked.id = r.id"
    " WHERE r.status = 'pending' AND (ranked.cap = 0 OR ranked.n + ranked.k <= ranked.cap)"
    " ORDER BY ranked.queue_rank, ranked.created_at LIMIT :limit FOR UPDATE OF r SKIP LOCKED)"
    + _CLAIM_RETURN
)
CLAIM_LOCK = text("SELECT pg_advisory_xact_lock(hashtext('runq.claim'))")
HAS_TENANT_LIMITS = text("SELECT EXISTS (SELECT 1 FROM tenant_limits WHERE max_inflight > 0)")

RENEW_LEASES = text(
    "WITH held AS ("
    " SELECT * FROM unnest(CAST(:run_ids AS uuid[]), CAST(:lease_ids AS uuid[])) AS h(run_id, lease_id)"
    "), renewed AS ("
    " UPDATE agent_runs r SET locked_until = now() + make_interval(secs => :lease_s), heartbeat_at = now()"
    " FROM held WHERE r.id = held.run_id AND r.lease_id = held.lease_id AND r.status = 'leased'"
    " RETURNING r.id, r.cancel_requested_at IS NOT NULL AS cancel_requested)"
    " SELECT held.run_id, renewed.id IS NOT NULL AS kept, coalesce(renewed.cancel_requested, false) AS cancel"
    " FROM held LEFT JOIN renewed ON renewed.id = held.run_id"
)

APPEND_EVENTS = _transition(where=FENCED, set_="heartbeat_at = heartbeat_at", outcome=False)
SAVE_CHECKPOINT = _transition(
    where=FENCED, set_="heartbeat_at = heartbeat_at", outcome=False, checkpoint=True
)
COMPLETE_IF_LEASED = _transition(
    where=FENCED,
    # A done run shows no error: earlier attempts' failures stay in the event log.
    set_="status = 'done', output = CAST(:output AS jsonb), finished_at = now(), error_code = NULL,"
    f" error_message = NULL, {CLEAR_LEASE}",
)
# Many completions of one worker in one statement: each run fenced by its own lease, each
# with its buffered events and then ``run.completed``. ``e.k`` numbers a run's events from 1.
COMPLETE_MANY_IF_LEASED = text(
    "WITH done AS ("
    " SELECT * FROM unnest(CAST(:run_ids AS uuid[]), CAST(:lease_ids AS uuid[]), CAST(:outputs AS jsonb[]))"
    " AS d(run_id, lease_id, output)"
    "), e AS ("
    " SELECT x.run_id, x.type, x.data, row_number() OVER (PARTITION BY x.run_id ORDER BY x.ord) AS k,"
    " count(*) OVER (PARTITION BY x.run_id) AS n"
    " FROM unnest(CAST(:event_run_ids AS uuid[]), CAST(:types AS text[]), CAST(:datas AS jsonb[]))"
    " WITH ORDINALITY AS x(run_id, type, data, ord)"
    "), t AS ("
    " UPDATE agent_runs r SET status = 'done', output = d.output, finished_at = now(), error_code = NULL,"
    f" error_message = NULL, {CLEAR_LEASE},"
    " last_event_seq = r.last_event_seq + coalesce((SELECT max(e.n) FROM e WHERE e.run_id = r.id), 0) + 1,"
    " updated_at = now()"
    " FROM done d WHERE r.id = d.run_id AND r.lease_id = d.lease_id AND r.status = 'leased'"
    " RETURNING r.id, r.attempts, r.output, r.last_event_seq"
    "), ev AS ("
    " INSERT INTO run_events (run_id, seq, type, data, attempt)"
    " SELECT t.id, t.last_event_seq - e.n - 1 + e.k, e.type, e.data, t.attempts FROM t JOIN e ON e.run_id = t.id"
    " UNION ALL SELECT t.id, t.last_event_seq, 'run.completed', jsonb_build_object('output', t.output), t.attempts"
    " FROM t RETURNING run_id)"
    + _NOTIFY_MANY.format(rows="t")
    + f" SELECT t.id, t.last_event_seq FROM t WHERE {_NOTIFIED}"
)
RETRY_OR_BURY = _transition(
    where=FENCED,
    set_=_leave_lease("attempts < max_attempts", BACKOFF)
    + ", error_code = :error_code, error_message = :error_message",
)
BURY_IF_LEASED = _transition(
    where=FENCED,
    set_="status = 'dead', finished_at = now(), error_code = :error_code,"
    f" error_message = :error_message, {CLEAR_LEASE}",
)
FINALIZE_CANCEL = _transition(
    where=FENCED + " AND cancel_requested_at IS NOT NULL",
    set_=f"status = 'cancelled', finished_at = now(), {CLEAR_LEASE}",
)
RELEASE_IF_LEASED = _transition(
    where=FENCED,
    set_=_leave_lease("true", "make_interval()") + ", error_code = 'worker_shutdown', error_message = NULL",
    notify_runs=True,
)
CANCEL_PENDING = _transition(
    where="id = :run_id AND (CAST(:tenant_id AS text) IS NULL OR tenant_id = :tenant_id) AND status = 'pending'",
    set_="status = 'cancelled', cancel_requested_at = now(), cancel_reason = :reason, finished_at = now()",
)
REQUEST_CANCEL_LEASED = _transition(
    where="id = :run_id AND (CAST(:tenant_id AS text) IS NULL OR tenant_id = :tenant_id)"
    " AND status = 'leased' AND cancel_requested_at IS NULL",
    set_="cancel_requested_at = now(), cancel_reason = :reason",
    outcome=False,
    notify_cancel=True,
)
REQUEUE = _transition(
    where="id = :run_id AND status IN ('dead', 'cancelled')",
    set_="status = 'pending', attempts = 0, available_at = now(), queue_rank = now() - " + RANK + ","
    " finished_at = NULL, output = NULL, cancel_requested_at = NULL, cancel_reason = NULL,"
    " error_code = NULL, error_message = NULL, detached_at = NULL",
    outcome=False,
    notify_runs=True,
)
# Expired leases: back to pending, or dead when attempts are used up, or cancelled when a
# cancel was requested. FOR UPDATE SKIP LOCKED plus the caller's advisory lock: one reaper.
REAP_EXPIRED = _transition(
    prelude="expired AS (SELECT id AS expired_id FROM agent_runs WHERE status = 'leased'"
    " AND locked_until < now() ORDER BY locked_until LIMIT :batch FOR UPDATE SKIP LOCKED), ",
    from_="FROM expired",
    where="id = expired.expired_id",
    set_=_leave_lease("attempts < max_attempts", "make_interval()")
    + ", error_code = CASE WHEN cancel_requested_at IS NULL THEN 'lease_expired' ELSE error_code END,"
    " error_message = CASE WHEN cancel_requested_at IS NULL THEN 'the lease expired before the run finished'"
    " ELSE error_message END",
    notify_runs=True,
)
_ABANDONED = (
    "abandoned AS (SELECT r.id AS abandoned_id FROM agent_runs r"
    " WHERE r.on_disconnect = 'cancel' AND r.status = {status} AND r.cancel_requested_at IS NULL"
    " AND NOT EXISTS (SELECT 1 FROM run_subscribers s WHERE s.run_id = r.id"
    "  AND s.seen_at > now() - make_interval(secs => :presence_ttl_s))"
    " AND greatest(r.created_at, r.detached_at, (SELECT max(s.seen_at) FROM run_subscribers s WHERE s.run_id = r.id))"
    "  + make_interval(secs => r.disconnect_grace_s) < now()"
    " LIMIT :batch FOR UPDATE SKIP LOCKED), "
)
CANCEL_ABANDONED_PENDING = _transition(
    prelude=_ABANDONED.format(status="'pending'"),
    from_="FROM abandoned",
    where="id = abandoned.abandoned_id",
    set_="status = 'cancelled', cancel_requested_at = now(), cancel_reason = 'abandoned', finished_at = now()",
)
REQUEST_CANCEL_ABANDONED = _transition(
    prelude=_ABANDONED.format(status="'leased'"),
    from_="FROM abandoned",
    where="id = abandoned.abandoned_id",
    set_="cancel_requested_at = now(), cancel_reason = 'abandoned'",
    outcome=False,
    notify_cancel=True,
)
REAPER_LOCK = text("SELECT pg_try_advisory_xact_lock(hashtext('runq.reaper'))")
# For the transactions whose locks others wait on or skip (a heartbeat's renewal holds the rows
# of all the worker's runs, a reaper pass the reaper's lock): a process that stops between a
# statement and its COMMIT (SIGSTOP, a VM pause, a blocked event loop) would keep them for as
# long as it is stopped, and no other worker could reap its runs, or any run. The server ends
# such a transaction after one lease of idleness instead. SET LOCAL: pooler-safe, this
# transaction only.
BOUND_IDLE_TRANSACTION = text("SELECT set_config('idle_in_transaction_session_timeout', :ms, true)")

READ_EVENTS = text(
    "SELECT seq, type, data, attempt, created_at FROM run_events"
    " WHERE run_id = :run_id AND seq > :after ORDER BY seq LIMIT :limit"
)
GET_EFFECT = text("SELECT result FROM run_effects WHERE run_id = :run_id AND key = :key")
# New events of many runs after each run's own cursor, in one statement: what a process that
# fans one LISTEN out to many streams needs to read once per wake-up, not once per stream.
READ_EVENTS_MANY = text(
    "SELECT e.run_id, e.seq, e.type, e.data, e.attempt, e.created_at"
    " FROM unnest(CAST(:run_ids AS uuid[]), CAST(:afters AS int[])) AS c(run_id, after)"
    " JOIN run_events e ON e.run_id = c.run_id AND e.seq > c.after ORDER BY e.run_id, e.seq"
)
# What the streams of one API process need after a wake-up, in one statement for every
# (run, cursor) they follow: each run's next events (data left as JSON text, to be sent as is)
# and, from the same snapshot, whether the run is terminal and which seq is its last.
READ_EVENT_PAGES = text(
    "SELECT c.i, r.status, r.last_event_seq, e.seq, e.type, e.data::text AS data"
    " FROM unnest(CAST(:run_ids AS uuid[]), CAST(:afters AS int[])) WITH ORDINALITY AS c(run_id, after, i)"
    " JOIN agent_runs r ON r.id = c.run_id"
    " LEFT JOIN LATERAL (SELECT seq, type, data FROM run_events"
    " WHERE run_id = c.run_id AND seq > c.after ORDER BY seq LIMIT :limit) e ON true"
    " ORDER BY c.i, e.seq"
)
RECORD_EFFECT = text(
    "INSERT INTO run_effects (run_id, key, result, attempt)"
    f" SELECT id, :key, CAST(:result AS jsonb), attempts FROM agent_runs WHERE {FENCED}"
    " ON CONFLICT (run_id, key) DO NOTHING RETURNING run_id"
)
CHECK_LEASE = text(f"SELECT 1 FROM agent_runs WHERE {FENCED}")

ATTACH_SUBSCRIBER = text(
    "INSERT INTO run_subscribers (run_id, subscriber_id) VALUES (:run_id, :subscriber_id)"
    " ON CONFLICT (run_id, subscriber_id) DO UPDATE SET seen_at = now()"
)
TOUCH_SUBSCRIBERS = text(
    "UPDATE run_subscribers SET seen_at = now() WHERE subscriber_id = ANY(CAST(:subscriber_ids AS uuid[]))"
)
DETACH_SUBSCRIBERS = text(
    "WITH gone AS (DELETE FROM run_subscribers s"
    " USING unnest(CAST(:run_ids AS uuid[]), CAST(:subscriber_ids AS uuid[])) AS d(run_id, subscriber_id)"
    " WHERE s.run_id = d.run_id AND s.subscriber_id = d.subscriber_id RETURNING s.run_id)"
    " UPDATE agent_runs SET detached_at = now() WHERE id IN (SELECT run_id FROM gone)"
)
FORGET_STALE_SUBSCRIBERS = text(
    "WITH stale AS (DELETE FROM run_subscribers"
    " WHERE seen_at < now() - make_interval(secs => CAST(:presence_ttl_s AS float8) * 4) RETURNING run_id, seen_at)"
    " UPDATE agent_runs r SET detached_at = greatest(r.detached_at, s.last_seen)"
    " FROM (SELECT run_id, max(seen_at) AS last_seen FROM stale GROUP BY run_id) s WHERE r.id = s.run_id"
)

COUNT_BY_STATUS = text("SELECT status, count(*) AS n FROM agent_runs GROUP BY status")
INFLIGHT_BY_TENANT = text(
    "SELECT tenant_id, count(*) AS n FROM agent_runs WHERE status = 'leased' GROUP BY tenant_id ORDER BY tenant_id"
)
OLDEST_PENDING_AGE = text(
    "SELECT coalesce(extract(epoch FROM now() - min(available_at)), 0) FROM agent_runs"
    " WHERE status = 'pending' AND available_at <= now()"
)
DEAD_SINCE = text(
    "SELECT count(*) FROM agent_runs WHERE status = 'dead'"
    " AND finished_at > now() - make_interval(secs => CAST(:window_s AS float8))"
)
# Every /metrics scrape: the live part of the queue only, through the partial indexes, so a
# scrape costs the same with millions of finished runs as with none.
QUEUE_DEPTH = text(
    "SELECT (SELECT count(*) FROM agent_runs WHERE status = 'pending') AS pending,"
    " (SELECT count(*) FROM agent_runs WHERE status = 'leased') AS leased,"
    " (SELECT coalesce(extract(epoch FROM now() - min(available_at)), 0) FROM agent_runs"
    "  WHERE status = 'pending' AND available_at <= now()) AS oldest_pending_age_s"
)
LIVE_LEASES = text(
    "SELECT locked_by, id, tenant_id, attempts, extract(epoch FROM now() - leased_at) AS lease_age_s,"
    " heartbeat_at, locked_until FROM agent_runs WHERE status = 'leased' ORDER BY locked_by, leased_at"
)
SET_TENANT_LIMIT = text(
    "INSERT INTO tenant_limits (tenant_id, max_inflight) VALUES (:tenant_id, :max_inflight)"
    " ON CONFLICT (tenant_id) DO UPDATE SET max_inflight = excluded.max_inflight, updated_at = now()"
)
GET_TENANT_LIMIT = text("SELECT max_inflight FROM tenant_limits WHERE tenant_id = :tenant_id")

PURGE_FINISHED = text(
    "WITH old AS (SELECT id FROM agent_runs WHERE status IN ('done', 'dead', 'cancelled')"
    " AND finished_at < now() - make_interval(secs => :older_than_s)"
    " ORDER BY finished_at LIMIT :batch FOR UPDATE SKIP LOCKED)"
    " DELETE FROM agent_runs WHERE id IN (SELECT id FROM old)"
)
COUNT_PURGEABLE = text(
    "SELECT count(*) FROM agent_runs WHERE status IN ('done', 'dead', 'cancelled')"
    " AND finished_at < now() - make_interval(secs => :older_than_s)"
)

_INFINITY = datetime.max.replace(tzinfo=UTC)
_DB_ERRORS = (OSError, InterfaceError, OperationalError)
# A server going away, restarting or not taking connections yet: connection exceptions (class
# 08), admin/crash shutdown and "cannot connect now" (57P01-57P03), too many connections. The
# asyncpg dialect wraps these as a plain DBAPIError, with the SQLSTATE on ``orig``.
_UNAVAILABLE_SQLSTATES = ("08", "57P01", "57P02", "57P03", "53300")


def database_down(exc: DBAPIError) -> bool:
    """Whether ``exc`` means PostgreSQL cannot be reached now (retry later), not a bad statement."""
    sqlstate = getattr(exc.orig, "sqlstate", None) or ""
    return (
        exc.connection_invalidated
        or isinstance(exc, _DB_ERRORS)
        or sqlstate.startswith(_UNAVAILABLE_SQLSTATES)
    )


# PostgreSQL's jsonb and text refuse NUL and unpaired surrogates, and a model or a tool can hand
# an agent either (half of a pair split across two streamed chunks): stored as U+FFFD instead,
# as the shell tool does for NUL, rather than failing every attempt of the run.
_UNSTORABLE_IN_JSON = re.compile("\x00|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]")
_UNSTORABLE_IN_TEXT = re.compile("[\x00\ud800-\udfff]")  # the driver encodes no surrogate at all


def _storable(value: Any) -> Any:
    if isinstance(value, str):
        return _UNSTORABLE_IN_JSON.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_storable(k): _storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_storable(v) for v in value]
    return value


def _storable_text(value: str) -> str:
    return _UNSTORABLE_IN_TEXT.sub("\ufffd", value)


def _dumps(value: Any) -> str:
    text = json.dumps(value, separators=(",", ":"), default=str)
    # Both come out as escapes (ensure_ascii): walk the value only when one may be there.
    if "\\u0000" in text or "\\ud" in text:
        text = json.dumps(_storable(value), separators=(",", ":"), default=str)
    return text


def _loads(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


def _run(row: Any) -> Run:
    m = row._mapping
    return Run(
        id=m["id"],
        tenant_id=m["tenant_id"],
        agent=m["agent"],
        status=Status(m["status"]),
        priority=m["priority"],
        attempts=m["attempts"],
        max_attempts=m["max_attempts"],
        input=_loads(m["input_json"]),
        budget=_loads(m["budget_json"]),
        output=_loads(m["output"]),
        available_at=m["available_at"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
        finished_at=m["finished_at"],
        cancel_requested_at=m["cancel_requested_at"],
        cancel_reason=m["cancel_reason"],
        error_code=m["error_code"],
        error_message=m["error_message"],
        on_disconnect=m["on_disconnect"],
        disconnect_grace_s=m["disconnect_grace_s"],
        last_event_seq=m["last_event_seq"],
        locked_by=m["locked_by"],
        locked_until=m["locked_until"],
    )


async def _analyze_runs(conn: AsyncConnection) -> None:
    """ANALYZE ``agent_runs`` inside ``conn``'s transaction, or skip it if that would wait (a
    running autovacuum holds the lock) or is not allowed (a role that does not own the table)."""
    try:
        async with conn.begin_nested():
            await conn.execute(ANALYZE_LOCK_TIMEOUT)
            await conn.execute(ANALYZE_RUNS)
    except DBAPIError as exc:
        if database_down(exc):
            raise
        log.warning("statistics not refreshed after a bulk enqueue: %s", exc.orig)


def _events(events: NewEvents) -> dict[str, list[str]]:
    return {"types": [t for t, _ in events], "datas": [_dumps(d) for _, d in events]}


def request_hash(body: Mapping[str, Any]) -> str:
    """Stable digest of a create request, to tell an idempotent repeat from a conflicting one."""
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class QueueStats:
    by_status: dict[str, int]
    inflight_by_tenant: dict[str, int]
    oldest_pending_age_s: float
    dead_last_hour: int


@dataclass(frozen=True, slots=True)
class QueueDepth:
    pending: int
    leased: int
    oldest_pending_age_s: float


class Queue:
    """The queue's operations; each method is one short transaction on its own connection."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        lease_s: float = 30.0,
        retry_base_s: float = 5.0,
        retry_max_s: float = 300.0,
        priority_aging_s: float = 60.0,
        tenant_max_inflight: int = 0,
        presence_ttl_s: float = 15.0,
    ) -> None:
        self.engine = engine
        self.lease_s = lease_s
        self.retry_base_s = retry_base_s
        self.retry_max_s = retry_max_s
        self.aging_s = priority_aging_s
        self.tenant_max_inflight = tenant_max_inflight
        self.presence_ttl_s = presence_ttl_s
        self._limits_checked_at = float("-inf")
        self._has_limits = False

    @classmethod
    def from_settings(cls, engine: AsyncEngine, settings: Settings) -> Queue:
        """The queue as configured by ``RUNQ_*`` (the API, the worker and the CLI)."""
        return cls(
            engine,
            lease_s=settings.lease_s,
            retry_base_s=settings.retry_base_s,
            retry_max_s=settings.retry_max_s,
            priority_aging_s=settings.priority_aging_s,
            tenant_max_inflight=settings.tenant_max_inflight,
            presence_ttl_s=settings.presence_ttl_s,
        )

    @asynccontextmanager
    async def _tx(self) -> AsyncIterator[AsyncConnection]:
        """A transaction; connection failures surface as :class:`DatabaseUnavailable`."""
        try:
            async with self.engine.begin() as conn:
                yield conn
        except DBAPIError as exc:
            if database_down(exc):
                raise DatabaseUnavailable(str(exc.orig)) from exc
            raise
        except _DB_ERRORS as exc:
            raise DatabaseUnavailable(str(exc)) from exc

    @asynccontextmanager
    async def _statement(self) -> AsyncIterator[AsyncConnection]:
        """For one statement in autocommit, without BEGIN/COMMIT round trips on the hot paths.

        A statement is atomic on its own: a transition's CTEs (status, events, checkpoint,
        NOTIFY) commit together, and a read sees one snapshot.
        """
        try:
            async with self.engine.connect() as conn:
                yield await conn.execution_options(isolation_level="AUTOCOMMIT")
        except DBAPIError as exc:
            if database_down(exc):
                raise DatabaseUnavailable(str(exc.orig)) from exc
            raise
        except _DB_ERRORS as exc:
            raise DatabaseUnavailable(str(exc)) from exc

    # -- creating and reading runs ---------------------------------------------------------

    async def enqueue(
        self,
        *,
        tenant_id: str,
        agent: str,
        input: Mapping[str, Any],
        budget: Mapping[str, Any] | None = None,
        priority: int = 0,
        max_attempts: int = 3,
        delay_s: float = 0.0,
        on_disconnect: str = "continue",
        disconnect_grace_s: float = 30.0,
        idempotency_key: str | None = None,
        request_digest: str | None = None,
    ) -> tuple[Run, bool]:
        """Store a pending run with its ``run.queued`` event; ``(run, created)``.

        A repeat with the same idempotency key returns the first run when the request digest
        matches and raises :class:`IdempotencyConflict` when it does not.
        """
        params = {
            "tenant_id": tenant_id,
            "agent": agent,
            "priority": priority,
            "max_attempts": max_attempts,
            "delay_s": float(delay_s),
            "aging_s": self.aging_s,
            "input": _dumps(input),
            "budget": _dumps(budget or {}),
            "idempotency_key": idempotency_key,
            "request_hash": request_digest,
            "on_disconnect": on_disconnect,
            "disconnect_grace_s": float(disconnect_grace_s),
        }
        async with self._statement() as conn:
            row = (await conn.execute(ENQUEUE, params)).first()
            if row is not None:
                return _run(row), True
            # ON CONFLICT waited for the first inserter to commit; this next statement's
            # snapshot sees its row.
            existing = (
                await conn.execute(
                    GET_BY_IDEMPOTENCY_KEY,
                    {"tenant_id": tenant_id, "idempotency_key": idempotency_key},
                )
            ).one()
        if existing._mapping["request_hash"] != request_digest:
            raise IdempotencyConflict(idempotency_key)
        return _run(existing), False

    async def enqueue_many(
        self,
        *,
        tenant_id: str,
        agent: str,
        inputs: Sequence[Mapping[str, Any]],
        priority: int = 0,
        max_attempts: int = 3,
        delay_s: float = 0.0,
    ) -> list[uuid.UUID]:
        """Store many pending runs (each with its ``run.queued``) in one statement; their ids."""
        if not inputs:
            return []
        params = {
            "tenant_id": tenant_id,
            "agent": agent,
            "priority": priority,
            "max_attempts": max_attempts,
            "aging_s": self.aging_s,
            "delay_s": delay_s,
            "inputs": [_dumps(i) for i in inputs],
        }
        async with self._tx() as conn:
            ids = (await conn.execute(ENQUEUE_MANY, params)).scalar()
            if len(inputs) >= BULK_ANALYZE_MIN_RUNS:
                await _analyze_runs(conn)
        return list(ids or [])

    async def get_run(self, run_id: uuid.UUID, *, tenant_id: str | None) -> Run:
        """The run, or :class:`RunNotFound` (also for another tenant's run)."""
        async with self._statement() as conn:
            row = (await conn.execute(GET_RUN, {"run_id": run_id, "tenant_id": tenant_id})).first()
        if row is None:
            raise RunNotFound(str(run_id))
        return _run(row)

    async def list_runs(
        self,
        *,
        tenant_id: str | None,
        status: Status | None = None,
        limit: int = 50,
        before: tuple[datetime, uuid.UUID] | None = None,
    ) -> list[Run]:
        """Newest first; ``before`` is the keyset cursor ``(created_at, id)`` of the last row seen."""
        before_at, before_id = before or (_INFINITY, uuid.UUID(int=(1 << 128) - 1))
        params = {
            "tenant_id": tenant_id,
            "status": status.value if status else None,
            "before_at": before_at,
            "before_id": before_id,
            "limit": limit,
        }
        async with self._statement() as conn:
            rows = (await conn.execute(LIST_RUNS, params)).all()
        return [_run(r) for r in rows]

    async def read_events(self, run_id: uuid.UUID, *, after: int = 0, limit: int = 1000) -> list[Event]:
        """Events with ``seq > after`` in order; seqs commit in order, so none can appear later below."""
        async with self._statement() as conn:
            rows = (
                await conn.execute(READ_EVENTS, {"run_id": run_id, "after": after, "limit": limit})
            ).all()
        return [
            Event(seq=r.seq, type=r.type, data=_loads(r.data), attempt=r.attempt, created_at=r.created_at)
            for r in rows
        ]

    # -- the worker's side: claims and fenced writes -----------------------------------------

    async def claim_batch(self, *, worker_id: str, limit: int) -> list[Claim]:
        """Lease up to ``limit`` runs (SKIP LOCKED) and append each one's ``run.started``."""
        if limit <= 0:
            return []
        params = {"worker_id": worker_id, "limit": limit, "lease_s": self.lease_s}
        capped = await self._caps_apply()
        rows: list[Row[Any]] = []
        if capped:
            async with self._tx() as conn:
                await conn.execute(CLAIM_LOCK)
                params |= {"default_cap": self.tenant_max_inflight, "scan": max(limit * 8, 64)}
                # The window of candidates can hold only tenants that reach their cap within
                # it (one tenant's backlog, say); look again, with those claims now counted,
                # so a free slot goes to the next tenant in this round, not a later one.
                while len(rows) < limit and (
                    more := (await conn.execute(CLAIM_BATCH_CAPPED, params | {"limit": limit - len(rows)})).all()
                ):
                    rows += more
        else:
            async with self._statement() as conn:
                rows += (await conn.execute(CLAIM_BATCH, params)).all()
        return [
            Claim(run=_run(r), lease_id=r._mapping["lease_id"], resume_state=_loads(r._mapping["resume_state"]))
            for r in rows
        ]

    async def _caps_apply(self) -> bool:
        if self.tenant_max_inflight > 0:
            return True
        # Per-tenant overrides are rare; look for them every few seconds, not on every claim.
        now = time.monotonic()
        if now - self._limits_checked_at > 5.0:
            async with self._tx() as conn:
                self._has_limits = bool((await conn.execute(HAS_TENANT_LIMITS)).scalar())
            self._limits_checked_at = now
        return self._has_limits

    def _idle_bound(self) -> dict[str, str]:
        return {"ms": str(max(int(self.lease_s * 1000), 1))}

    async def renew_leases(self, leases: Mapping[uuid.UUID, uuid.UUID]) -> LeaseCheck:
        """Extend every lease this worker still holds, in one statement.

        Returns the runs whose lease is lost (the worker must stop them and write nothing more)
        and the runs with a cancel request.
        """
        if not leases:
            return LeaseCheck(lost=frozenset(), cancel_requested=frozenset())
        ordered = sorted(leases)  # a fixed lock order across workers' batches
        params = {
            "run_ids": ordered,
            "lease_ids": [leases[r] for r in ordered],
            "lease_s": self.lease_s,
        }
        async with self._tx() as conn:
            await conn.execute(BOUND_IDLE_TRANSACTION, self._idle_bound())
            rows = (await conn.execute(RENEW_LEASES, params)).all()
        return LeaseCheck(
            lost=frozenset(r.run_id for r in rows if not r.kept),
            cancel_requested=frozenset(r.run_id for r in rows if r.cancel),
        )

    async def _fenced(self, statement: TextClause, claim_ref: tuple[uuid.UUID, uuid.UUID], **params: Any) -> Run:
        run_id, lease_id = claim_ref
        params.setdefault("types", [])
        params.setdefault("datas", [])
        async with self._statement() as conn:
            row = (await conn.execute(statement, {"run_id": run_id, "lease_id": lease_id, **params})).first()
        if row is None:
            raise LeaseLost(str(run_id))
        return _run(row)

    async def append_events(self, *, run_id: uuid.UUID, lease_id: uuid.UUID, events: NewEvents) -> Run:
        """Append events for a leased run; :class:`LeaseLost` if the claim is no longer ours."""
        return await self._fenced(APPEND_EVENTS, (run_id, lease_id), **_events(events))

    async def save_checkpoint(
        self, *, run_id: uuid.UUID, lease_id: uuid.UUID, state: Any, events: NewEvents = ()
    ) -> Run:
        """Store the resume state together with the events produced so far, atomically."""
        return await self._fenced(
            SAVE_CHECKPOINT, (run_id, lease_id), state=_dumps(state), **_events(events)
        )

    async def complete(
        self, *, run_id: uuid.UUID, lease_id: uuid.UUID, output: Any, events: NewEvents = ()
    ) -> Run:
        """``done`` with ``run.completed {output}``."""
        return await self._fenced(
            COMPLETE_IF_LEASED, (run_id, lease_id), output=_dumps(output), **_events(events)
        )

    async def complete_many(
        self, completions: Sequence[tuple[uuid.UUID, uuid.UUID, Any, NewEvents]]
    ) -> dict[uuid.UUID, Completed]:
        """``complete`` for many ``(run_id, lease_id, output, events)`` in one statement.

        Returns the runs now ``done``; a run missing from the result lost its lease (the same
        as :class:`LeaseLost` from ``complete``) and nothing was written for it.
        """
        if not completions:
            return {}
        ordered = sorted(completions, key=lambda c: c[0])  # a fixed lock order, as in renew_leases
        params = {
            "run_ids": [c[0] for c in ordered],
            "lease_ids": [c[1] for c in ordered],
            "outputs": [_dumps(c[2]) for c in ordered],
            "event_run_ids": [c[0] for c in ordered for _ in c[3]],
            "types": [t for c in ordered for t, _ in c[3]],
            "datas": [_dumps(d) for c in ordered for _, d in c[3]],
        }
        async with self._statement() as conn:
            rows = (await conn.execute(COMPLETE_MANY_IF_LEASED, params)).all()
        return {row.id: Completed(id=row.id, last_event_seq=row.last_event_seq) for row in rows}

    async def retry_or_bury(
        self,
        *,
        run_id: uuid.UUID,
        lease_id: uuid.UUID,
        error_code: str,
        error_message: str,
        events: NewEvents = (),
    ) -> Run:
        """A retryable failure: ``pending`` after backoff (``run.retrying``), or ``dead`` when
        attempts are used up (``run.failed``)."""
        return await self._fenced(
            RETRY_OR_BURY,
            (run_id, lease_id),
            error_code=error_code,
            error_message=_storable_text(error_message),
            retry_base_s=self.retry_base_s,
            retry_max_s=self.retry_max_s,
            aging_s=self.aging_s,
            **_events(events),
        )

    async def bury(
        self,
        *,
        run_id: uuid.UUID,
        lease_id: uuid.UUID,
        error_code: str,
        error_message: str,
        events: NewEvents = (),
    ) -> Run:
        """A fatal failure: ``dead`` at once with ``run.failed``."""
        return await self._fenced(
            BURY_IF_LEASED,
            (run_id, lease_id),
            error_code=error_code,
            error_message=_storable_text(error_message),
            **_events(events),
        )

    async def finalize_cancel(self, *, run_id: uuid.UUID, lease_id: uuid.UUID, events: NewEvents = ()) -> Run:
        """The worker honours a cancel request: ``cancelled`` with ``run.cancelled {reason}``."""
        return await self._fenced(FINALIZE_CANCEL, (run_id, lease_id), **_events(events))

    async def release(self, *, run_id: uuid.UUID, lease_id: uuid.UUID, events: NewEvents = ()) -> Run:
        """Graceful shutdown: back to ``pending``, available at once, for another worker."""
        return await self._fenced(RELEASE_IF_LEASED, (run_id, lease_id), aging_s=self.aging_s, **_events(events))

    async def read_events_many(self, cursors: Mapping[uuid.UUID, int]) -> dict[uuid.UUID, list[Event]]:
        """``read_events`` for many runs at once: each run's events after its cursor, in order."""
        if not cursors:
            return {}
        params = {"run_ids": list(cursors), "afters": list(cursors.values())}
        async with self._tx() as conn:
            rows = (await conn.execute(READ_EVENTS_MANY, params)).all()
        events: dict[uuid.UUID, list[Event]] = {run_id: [] for run_id in cursors}
        for r in rows:
            events[r.run_id].append(
                Event(seq=r.seq, type=r.type, data=_loads(r.data), attempt=r.attempt, created_at=r.created_at)
            )
        return events

    async def read_event_pages(
        self, cursors: Sequence[tuple[uuid.UUID, int]], *, limit: int
    ) -> list[EventPage | None]:
        """For each ``(run_id, after)``: up to ``limit`` events after the cursor and the run's
        state, all from one snapshot; ``None`` for a run that no longer exists."""
        if not cursors:
            return []
        params = {"run_ids": [c[0] for c in cursors], "afters": [c[1] for c in cursors], "limit": limit}
        async with self._statement() as conn:
            rows = (await conn.execute(READ_EVENT_PAGES, params)).all()
        pages: list[EventPage | None] = [None] * len(cursors)
        for i, status, last_event_seq, seq, type_, data in rows:
            page = pages[i - 1]
            if page is None:
                page = pages[i - 1] = EventPage(Status(status), last_event_seq, [])
            if seq is not None:
                page.events.append((seq, type_, data))
        return pages

    async def find_effect(self, *, run_id: uuid.UUID, key: str) -> tuple[bool, Any]:
        """``(found, result)`` from the effect ledger."""
        async with self._statement() as conn:
            row = (await conn.execute(GET_EFFECT, {"run_id": run_id, "key": key})).first()
        return (True, _loads(row.result)) if row else (False, None)

    async def record_effect(self, *, run_id: uuid.UUID, lease_id: uuid.UUID, key: str, result: Any) -> None:
        """Commit an effect record, fenced by the lease."""
        params = {"run_id": run_id, "lease_id": lease_id, "key": key, "result": _dumps(result)}
        async with self._tx() as conn:
            if (await conn.execute(RECORD_EFFECT, params)).first() is None and (
                await conn.execute(CHECK_LEASE, {"run_id": run_id, "lease_id": lease_id})
            ).first() is None:
                raise LeaseLost(str(run_id))

    # -- cancel, requeue and the reaper ----------------------------------------------------------

    async def request_cancel(
        self, run_id: uuid.UUID, *, tenant_id: str | None, reason: str = "user", note: str | None = None
    ) -> Run:
        """Pending → ``cancelled`` now; leased → cancel requested (the worker finishes it).

        A repeat while the cancel is under way returns the run; a terminal run raises
        :class:`RunFinished`.
        """
        data: dict[str, Any] = {"reason": reason} | ({"note": note} if note else {})
        params = {"run_id": run_id, "tenant_id": tenant_id, "reason": reason, **_events([("run.cancel_requested", data)])}
        for _ in range(3):  # a run can move between pending and leased under us; look again
            async with self._tx() as conn:
                row = (await conn.execute(CANCEL_PENDING, params)).first()
                row = row or (await conn.execute(REQUEST_CANCEL_LEASED, params)).first()
                if row is not None:
                    return _run(row)
                row = (await conn.execute(GET_RUN, {"run_id": run_id, "tenant_id": tenant_id})).first()
            if row is None:
                raise RunNotFound(str(run_id))
            run = _run(row)
            if run.is_terminal:
                raise RunFinished(str(run_id))
            if run.status is Status.LEASED and run.cancel_requested_at is not None:
                return run
        raise RunNotFound(str(run_id))  # pragma: no cover - needs three races in a row

    async def requeue(self, run_id: uuid.UUID) -> Run:
        """Admin: a dead or cancelled run back to pending at attempt 0, history kept."""
        params = {"run_id": run_id, "aging_s": self.aging_s, **_events([("run.queued", {"requeued": True})])}
        async with self._tx() as conn:
            row = (await conn.execute(REQUEUE, params)).first()
            if row is None:
                exists = (await conn.execute(GET_RUN, {"run_id": run_id, "tenant_id": None})).first()
        if row is None:
            raise NotRequeueable(str(run_id)) if exists else RunNotFound(str(run_id))
        return _run(row)

    async def reap_expired(self, *, batch: int = 500) -> list[Run]:
        """Expired leases back to pending / dead / cancelled; one reaper at a time cluster-wide."""
        params = {"batch": batch, "aging_s": self.aging_s, "types": [], "datas": []}
        async with self._tx() as conn:
            await conn.execute(BOUND_IDLE_TRANSACTION, self._idle_bound())
            if not (await conn.execute(REAPER_LOCK)).scalar():
                return []
            rows = (await conn.execute(REAP_EXPIRED, params)).all()
        return [_run(r) for r in rows]

    async def cancel_abandoned(self, *, batch: int = 500) -> list[Run]:
        """Interactive runs nobody has watched for their grace window: cancel, reason ``abandoned``."""
        params = {
            "batch": batch,
            "presence_ttl_s": self.presence_ttl_s,
            **_events([("run.cancel_requested", {"reason": "abandoned"})]),
        }
        async with self._tx() as conn:
            await conn.execute(BOUND_IDLE_TRANSACTION, self._idle_bound())
            if not (await conn.execute(REAPER_LOCK)).scalar():
                return []
            await conn.execute(FORGET_STALE_SUBSCRIBERS, {"presence_ttl_s": self.presence_ttl_s})
            rows = [*(await conn.execute(CANCEL_ABANDONED_PENDING, params)).all()]
            rows += (await conn.execute(REQUEST_CANCEL_ABANDONED, params)).all()
        return [_run(r) for r in rows]

    async def purge_finished(self, *, older_than_s: float, batch: int = 500) -> int:
        """Delete one batch of finished runs (and, by cascade, their events) older than the age."""
        async with self._tx() as conn:
            result = await conn.execute(PURGE_FINISHED, {"older_than_s": older_than_s, "batch": batch})
        return result.rowcount or 0

    async def count_purgeable(self, *, older_than_s: float) -> int:
        """How many runs ``purge_finished`` would delete (``runq purge --dry-run``)."""
        async with self._statement() as conn:
            return int((await conn.execute(COUNT_PURGEABLE, {"older_than_s": older_than_s})).scalar_one())

    # -- subscriber presence -----------------------------------------------------------------

    async def attach_subscriber(self, *, run_id: uuid.UUID, subscriber_id: uuid.UUID) -> None:
        async with self._tx() as conn:
            await conn.execute(ATTACH_SUBSCRIBER, {"run_id": run_id, "subscriber_id": subscriber_id})

    async def touch_subscribers(self, subscriber_ids: Sequence[uuid.UUID]) -> None:
        if subscriber_ids:
            async with self._tx() as conn:
                await conn.execute(TOUCH_SUBSCRIBERS, {"subscriber_ids": list(subscriber_ids)})

    async def detach_subscribers(self, subscribers: Sequence[tuple[uuid.UUID, uuid.UUID]]) -> None:
        """Forget ``(run_id, subscriber_id)`` pairs whose streams closed, in one statement."""
        if not subscribers:
            return
        ordered = sorted(subscribers)  # a fixed lock order on the runs' rows
        params = {"run_ids": [s[0] for s in ordered], "subscriber_ids": [s[1] for s in ordered]}
        async with self._statement() as conn:
            await conn.execute(DETACH_SUBSCRIBERS, params)

    # -- operations ------------------------------------------------------------------------

    async def stats(self, *, dead_window_s: float = 3600.0) -> QueueStats:
        """Counts by status, in-flight per tenant, oldest runnable pending age, recent dead."""
        async with self._tx() as conn:
            counts = {r.status: r.n for r in await conn.execute(COUNT_BY_STATUS)}
            inflight = {r.tenant_id: r.n for r in await conn.execute(INFLIGHT_BY_TENANT)}
            oldest = float((await conn.execute(OLDEST_PENDING_AGE)).scalar() or 0)
            dead = int((await conn.execute(DEAD_SINCE, {"window_s": dead_window_s})).scalar() or 0)
        return QueueStats(
            by_status={s.value: counts.get(s.value, 0) for s in Status},
            inflight_by_tenant=inflight,
            oldest_pending_age_s=oldest,
            dead_last_hour=dead,
        )

    async def queue_depth(self) -> QueueDepth:
        """Pending and leased counts and the oldest runnable pending age; never reads history."""
        async with self._tx() as conn:
            row = (await conn.execute(QUEUE_DEPTH)).one()
        return QueueDepth(
            pending=row.pending, leased=row.leased, oldest_pending_age_s=float(row.oldest_pending_age_s)
        )

    async def live_leases(self) -> dict[str, list[dict[str, Any]]]:
        """Leased runs grouped by worker id, with lease age and last heartbeat."""
        async with self._tx() as conn:
            rows = (await conn.execute(LIVE_LEASES)).all()
        workers: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            workers.setdefault(r.locked_by, []).append(
                {
                    "run_id": r.id,
                    "tenant_id": r.tenant_id,
                    "attempt": r.attempts,
                    "lease_age_s": float(r.lease_age_s or 0),
                    "heartbeat_at": r.heartbeat_at,
                    "locked_until": r.locked_until,
                }
            )
        return workers

    async def set_tenant_limit(self, *, tenant_id: str, max_inflight: int) -> None:
        """Override the in-flight cap of one tenant (0 = no cap)."""
        async with self._tx() as conn:
            await conn.execute(SET_TENANT_LIMIT, {"tenant_id": tenant_id, "max_inflight": max_inflight})
        self._limits_checked_at = float("-inf")

    async def tenant_limit(self, tenant_id: str) -> int | None:
        async with self._tx() as conn:
            return (await conn.execute(GET_TENANT_LIMIT, {"tenant_id": tenant_id})).scalar()
