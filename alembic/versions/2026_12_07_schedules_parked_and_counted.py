"""A schedule that cannot be processed is parked, not a stop for every other; a tenant's
schedules are counted (docs/schedules.md, docs/limits.md).

- ``schedules.error`` / ``error_at``: why the reaper could not fire the schedule, and when (a
  time zone this worker cannot load, a slot it cannot compute, a run PostgreSQL refused);
  cleared when it fires again.
- ``schedules.not_before``: the reaper leaves the schedule alone until then, though its slot has
  come: a parked schedule for a while, a slot its tenant's create limits refused until their
  ``Retry-After``. The due index is on ``greatest(next_run_at, not_before)``, so a held schedule
  neither heads the due list nor wakes the reaper before its time.
- ``tenant_buckets.max_schedules``: one more limit (null: ``RUNQ_TENANT_MAX_SCHEDULES``, 0: none);
  ``runq_admit_schedule`` rides the create statement and locks the tenant's bucket row, as
  ``runq_take_stream_slot`` does, so concurrent creates on any API process count in turn.

Revision ID: 0025
Revises: 0021
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0021"
branch_labels = None
depends_on = None

ADMIT_SCHEDULE = """
CREATE FUNCTION runq_admit_schedule(p_tenant text, p_max integer) RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    cap integer;
BEGIN
    -- null: the tenant may create one more schedule; otherwise its max_schedules, which it is at
    SELECT max_schedules INTO cap FROM tenant_buckets WHERE tenant_id = p_tenant;
    cap := coalesce(cap, p_max, 0);
    IF cap <= 0 THEN
        RETURN NULL;
    END IF;
    INSERT INTO tenant_buckets (tenant_id) VALUES (p_tenant) ON CONFLICT DO NOTHING;
    PERFORM 1 FROM tenant_buckets WHERE tenant_id = p_tenant FOR UPDATE;
    IF (SELECT count(*) FROM (SELECT 1 FROM schedules WHERE tenant_id = p_tenant LIMIT cap) s) >= cap THEN
        RETURN cap;
    END IF;
    RETURN NULL;
END $$
"""


def upgrade() -> None:
    op.add_column("schedules", sa.Column("error", sa.Text(), nullable=True))
    op.add_column("schedules", sa.Column("error_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("schedules", sa.Column("not_before", sa.DateTime(timezone=True), nullable=True))
    op.drop_index("ix_schedules_due", table_name="schedules")
    op.create_index(
        "ix_schedules_due",
        "schedules",
        [sa.text("greatest(next_run_at, not_before)")],
        postgresql_where=sa.text("NOT paused"),
    )
    op.add_column("tenant_buckets", sa.Column("max_schedules", sa.Integer(), nullable=True))
    op.create_check_constraint(op.f("ck_tenant_buckets_max_schedules"), "tenant_buckets", "max_schedules >= 0")
    op.execute(ADMIT_SCHEDULE)


def downgrade() -> None:
    op.execute("DROP FUNCTION runq_admit_schedule(text, integer)")
    op.drop_constraint(op.f("ck_tenant_buckets_max_schedules"), "tenant_buckets", type_="check")
    op.drop_column("tenant_buckets", "max_schedules")
    op.drop_index("ix_schedules_due", table_name="schedules")
    op.create_index("ix_schedules_due", "schedules", ["next_run_at"], postgresql_where=sa.text("NOT paused"))
    op.drop_column("schedules", "not_before")
    op.drop_column("schedules", "error_at")
    op.drop_column("schedules", "error")
