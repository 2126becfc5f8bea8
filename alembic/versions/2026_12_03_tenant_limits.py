"""Tenant limits (docs/limits.md): per-tenant create rate, max pending and max streams,
enforced in the database so that every API process counts one figure.

``runq_admit_create`` rides each create's insert statement: an unlimited tenant costs one
primary-key lookup of a small table; a limited one locks its ``tenant_buckets`` row (so
concurrent creates of that tenant, from any process, count in turn), counts its queued runs
and takes a token from its bucket. ``runq_take_stream_slot`` does the same for open streams.
Both are volatile PL/pgSQL: each query inside sees what committed before it, after the lock.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

QUEUED_RUNS = """
CREATE FUNCTION runq_queued_runs(p_tenant text, p_cap integer) RETURNS integer
LANGUAGE sql STABLE AS $$
    -- a tenant's pending and waiting runs, counted no further than p_cap
    SELECT count(*)::integer FROM (
        SELECT 1 FROM agent_runs
         WHERE tenant_id = p_tenant AND status IN ('pending', 'waiting')
         LIMIT p_cap) q
$$
"""

ADMIT_CREATE = """
CREATE FUNCTION runq_admit_create(p_tenant text, p_key text, p_per_s float8, p_burst integer,
                                  p_max_pending integer)
RETURNS TABLE (limit_refused text, limit_retry_after_s float8, limit_quota float8,
               limit_window_s float8, limit_remaining integer)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    b tenant_buckets;
    rate float8;
    burst float8;
    cap integer;
    now_at timestamptz := clock_timestamp();
    left_ float8;
    seen integer;
    counted_at timestamptz;
BEGIN
    SELECT * INTO b FROM tenant_buckets WHERE tenant_id = p_tenant;
    rate := coalesce(b.create_per_s, p_per_s, 0);
    cap := coalesce(b.max_pending, p_max_pending, 0);
    IF rate <= 0 AND cap <= 0 THEN
        RETURN;  -- unlimited: admitted
    END IF;
    IF p_key IS NOT NULL AND EXISTS (
        SELECT 1 FROM agent_runs WHERE tenant_id = p_tenant AND idempotency_key = p_key) THEN
        RETURN;  -- a repeat of an idempotent create: answered as before, not counted
    END IF;
    IF b.tenant_id IS NULL THEN
        INSERT INTO tenant_buckets (tenant_id) VALUES (p_tenant) ON CONFLICT DO NOTHING;
    END IF;
    SELECT * INTO b FROM tenant_buckets WHERE tenant_id = p_tenant FOR UPDATE;
    IF cap > 0 THEN
        -- pending_seen is the count at pending_counted_at plus the creates admitted since: never
        -- below the truth for creates (runs only leave the queue otherwise), so the index is
        -- counted again only near the cap, or once a second for runs that came back (a retry,
        -- a wait, a schedule's slot).
        seen := b.pending_seen;
        counted_at := b.pending_counted_at;
        IF counted_at IS NULL OR seen IS NULL OR seen >= cap OR now_at - counted_at > interval '1 second' THEN
            seen := runq_queued_runs(p_tenant, cap);
            counted_at := now_at;
        END IF;
        IF seen >= cap THEN
            UPDATE tenant_buckets SET pending_seen = seen, pending_counted_at = counted_at
             WHERE tenant_id = p_tenant;
            RETURN QUERY SELECT 'too_many_pending'::text, 1::float8, cap::float8, NULL::float8, 0;
            RETURN;
        END IF;
    END IF;
    left_ := b.tokens;
    IF rate > 0 THEN
        burst := greatest(1, coalesce(nullif(b.create_burst, 0), p_burst, ceil(2 * rate)));
        left_ := CASE WHEN b.refilled_at IS NULL THEN burst
                      ELSE least(burst, b.tokens + rate * greatest(0, extract(epoch FROM now_at - b.refilled_at)))
                 END;
        IF left_ < 1 THEN
            RETURN QUERY SELECT 'rate_limited'::text, (1 - left_) / rate, burst, burst / rate, 0;
            RETURN;
        END IF;
        left_ := left_ - 1;
    END IF;
    UPDATE tenant_buckets
       SET tokens = left_, refilled_at = CASE WHEN rate > 0 THEN now_at ELSE refilled_at END,
           pending_seen = seen + 1, pending_counted_at = counted_at
     WHERE tenant_id = p_tenant;
END $$
"""

TAKE_STREAM_SLOT = """
CREATE FUNCTION runq_take_stream_slot(p_id uuid, p_tenant text, p_max integer, p_ttl_s float8)
RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    cap integer;
BEGIN
    -- null: the slot is taken; otherwise the tenant's max_streams, which it is at
    SELECT max_streams INTO cap FROM tenant_buckets WHERE tenant_id = p_tenant;
    cap := coalesce(cap, p_max, 0);
    IF cap > 0 THEN
        INSERT INTO tenant_buckets (tenant_id) VALUES (p_tenant) ON CONFLICT DO NOTHING;
        PERFORM 1 FROM tenant_buckets WHERE tenant_id = p_tenant FOR UPDATE;
        DELETE FROM stream_slots WHERE tenant_id = p_tenant AND expires_at < clock_timestamp();
        IF (SELECT count(*) FROM stream_slots WHERE tenant_id = p_tenant) >= cap THEN
            RETURN cap;
        END IF;
    END IF;
    INSERT INTO stream_slots (id, tenant_id, expires_at)
    VALUES (p_id, p_tenant, clock_timestamp() + make_interval(secs => p_ttl_s));
    RETURN NULL;
END $$
"""


def upgrade() -> None:
    op.create_table(
        "tenant_buckets",
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("create_per_s", sa.Float(), nullable=True),
        sa.Column("create_burst", sa.Integer(), nullable=True),
        sa.Column("max_pending", sa.Integer(), nullable=True),
        sa.Column("max_streams", sa.Integer(), nullable=True),
        sa.Column("tokens", sa.Float(), server_default="0", nullable=False),
        sa.Column("refilled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("pending_seen", sa.Integer(), nullable=True),
        sa.Column("pending_counted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("create_per_s >= 0", name=op.f("ck_tenant_buckets_create_per_s")),
        sa.CheckConstraint("create_burst >= 0", name=op.f("ck_tenant_buckets_create_burst")),
        sa.CheckConstraint("max_pending >= 0", name=op.f("ck_tenant_buckets_max_pending")),
        sa.CheckConstraint("max_streams >= 0", name=op.f("ck_tenant_buckets_max_streams")),
        sa.PrimaryKeyConstraint("tenant_id", name=op.f("pk_tenant_buckets")),
    )
    op.create_table(
        "stream_slots",
        sa.Column("id", sa.UUID(), nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_stream_slots")),
    )
    op.create_index("ix_stream_slots_tenant_id", "stream_slots", ["tenant_id"])
    op.create_index(
        "ix_agent_runs_tenant_queued",
        "agent_runs",
        ["tenant_id"],
        postgresql_where=sa.text("status IN ('pending', 'waiting') AND tenant_id IS NOT NULL"),
    )
    op.execute(QUEUED_RUNS)
    op.execute(ADMIT_CREATE)
    op.execute(TAKE_STREAM_SLOT)


def downgrade() -> None:
    op.execute("DROP FUNCTION runq_take_stream_slot(uuid, text, integer, float8)")
    op.execute("DROP FUNCTION runq_admit_create(text, text, float8, integer, integer)")
    op.execute("DROP FUNCTION runq_queued_runs(text, integer)")
    op.drop_index("ix_agent_runs_tenant_queued", table_name="agent_runs")
    op.drop_index("ix_stream_slots_tenant_id", table_name="stream_slots")
    op.drop_table("stream_slots")
    op.drop_table("tenant_buckets")
