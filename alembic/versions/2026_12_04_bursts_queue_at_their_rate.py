"""A rate-limited tenant's burst queues at its rate: each create tells how far into the tenant's
bucket it went, and the run's queue rank is pushed back by as much (docs/limits.md).

Without it, the runs a tenant creates in one instant (as many as its burst) all rank at that
instant, ahead of every other tenant's run created a moment later: with the workers busy, a
quiet tenant's run waits behind the whole burst. Now the k-th create of a burst ranks (k - 1) /
``create_per_s`` seconds later, where it would have stood had the tenant created at its rate
(stride scheduling, as a fair queue orders flows). Only the order among waiting runs changes:
``available_at`` is the same, so idle workers take a burst at once. A tenant without a create
rate is not ranked otherwise.

``runq_admit_create`` now answers an admitted create of a rate-limited tenant with one row too
(``limit_refused`` null, ``rank_delay_s``); a refusal's row is unchanged.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-04
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

ADMIT_CREATE = """
CREATE FUNCTION runq_admit_create(p_tenant text, p_key text, p_per_s float8, p_burst integer,
                                  p_max_pending integer)
RETURNS TABLE (limit_refused text, limit_retry_after_s float8, limit_quota float8,
               limit_window_s float8, limit_remaining integer, rank_delay_s float8)
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
            RETURN QUERY SELECT 'too_many_pending'::text, 1::float8, cap::float8, NULL::float8, 0, NULL::float8;
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
            RETURN QUERY SELECT 'rate_limited'::text, (1 - left_) / rate, burst, burst / rate, 0, NULL::float8;
            RETURN;
        END IF;
        left_ := left_ - 1;
    END IF;
    UPDATE tenant_buckets
       SET tokens = left_, refilled_at = CASE WHEN rate > 0 THEN now_at ELSE refilled_at END,
           pending_seen = seen + 1, pending_counted_at = counted_at
     WHERE tenant_id = p_tenant;
    IF rate > 0 THEN
        -- admitted: the tokens this create found spent are the creates ahead of it in its burst
        RETURN QUERY SELECT NULL::text, NULL::float8, NULL::float8, NULL::float8, NULL::integer,
                            greatest(0, burst - 1 - left_) / rate;
    END IF;
END $$
"""
DROP_ADMIT_CREATE = "DROP FUNCTION runq_admit_create(text, text, float8, integer, integer)"


def _migration_0017() -> ModuleType:
    """Migration 0017, whose function the downgrade puts back (its text is written there once)."""
    spec = importlib.util.spec_from_file_location("runq_migration_0017", Path(__file__).with_name("2026_12_03_tenant_limits.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def upgrade() -> None:
    op.execute(DROP_ADMIT_CREATE)
    op.execute(ADMIT_CREATE)


def downgrade() -> None:
    op.execute(DROP_ADMIT_CREATE)
    op.execute(_migration_0017().ADMIT_CREATE)
