"""The run lists' indexes and the re-homing's leave leased runs out (docs/schema.md).

A claim moves a run from pending to leased. ``status`` is in index predicates, so that update
is never HOT, and PostgreSQL adds an entry for the new row version to every index whose
predicate it meets: five (the primary key, ``ix_agent_runs_leased``,
``ix_agent_runs_tenant_created``, ``ix_agent_runs_created``, ``ix_agent_runs_unfinished``).
With the last three partial on "not leased", a claim adds two. Measured on a drain of no-op
runs (two workers, PostgreSQL 15): 0.088 → 0.080 ms of server CPU per run (docs/benchmarks.md).

Leased runs are few (at most the fleet's run slots) and ``ix_agent_runs_leased`` already holds
them: the lists of runs, the re-homing and the partition drop's last check read them through it
beside the rows of these indexes (app/queue/sql/runs.sql, maintenance.sql).

The indexes are rebuilt in the migration's transaction, as every index of ``agent_runs`` was
(0002, 0003, 0011), not ``CONCURRENTLY``: writes to the table wait for the three builds, each a
read of the whole table, so a deployment with a long history migrates at a quiet moment.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-04
"""

from __future__ import annotations

from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

TERMINAL = "'done', 'dead', 'cancelled'"


def _build(*, leased_out: bool) -> None:
    """Drop the three indexes and build them again, without the leased runs or with them."""
    where = " WHERE status <> 'leased'" if leased_out else ""
    going = f"{TERMINAL}, 'leased'" if leased_out else TERMINAL
    for name in ("ix_agent_runs_tenant_created", "ix_agent_runs_created", "ix_agent_runs_unfinished"):
        op.drop_index(name, table_name="agent_runs")
    op.execute(f"CREATE INDEX ix_agent_runs_tenant_created ON agent_runs (tenant_id, created_at DESC, id DESC){where}")
    op.execute(f"CREATE INDEX ix_agent_runs_created ON agent_runs (created_at DESC, id DESC){where}")
    op.execute(
        "CREATE INDEX ix_agent_runs_unfinished ON agent_runs (history_at)"
        f" WHERE status NOT IN ({going}) AND history_at IS NOT NULL"
    )


def upgrade() -> None:
    _build(leased_out=True)


def downgrade() -> None:
    _build(leased_out=False)
