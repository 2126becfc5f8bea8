"""run_events partitioned by day, so retention drops whole partitions (docs/schema.md).

The partition key is ``history_at``, a new column of ``agent_runs`` (the run's creation time
until the reaper re-homes a run that is still going a day later) copied onto every event and
held in step by a composite foreign key ``(run_id, history_at) → agent_runs (id, history_at)``
``ON UPDATE CASCADE``: every event of a run lives in the one partition its run names, so the
stream's reads prune to one partition, and moving a run moves its events atomically.

The upgrade converts the table in place, in the migration's transaction: the old table is
renamed, the partitioned one created with a default partition, one partition for the history
so far (``MINVALUE`` to today, when there is any) and one per day from today on, every row
copied, the old table dropped. The downgrade copies the rows back into an unpartitioned table.

Revision ID: 0011
Revises: 0009
Create Date: 2026-12-02
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0009"
branch_labels = None
depends_on = None

DAYS_AHEAD = 2  # as app/queue/partitions.py creates them; the reaper keeps it so from then on
COLUMNS = "run_id, seq, type, data, attempt, created_at"
TERMINAL = "'done', 'dead', 'cancelled'"
# Frozen here on purpose, as migration 0006 wrote it.
OUTBOX_TRIGGER = """
CREATE TRIGGER run_events_webhook_outbox AFTER INSERT ON run_events FOR EACH ROW
  WHEN (NEW.type IN ('run.completed', 'run.failed', 'run.cancelled', 'run.waiting'))
  EXECUTE FUNCTION runq_webhook_outbox()
"""


def _midnight(day: date) -> str:
    return datetime(day.year, day.month, day.day, tzinfo=UTC).isoformat()


def upgrade() -> None:
    op.add_column("agent_runs", sa.Column("history_at", sa.DateTime(timezone=True), nullable=True))
    op.execute("UPDATE agent_runs SET history_at = created_at")
    op.alter_column("agent_runs", "history_at", nullable=False, server_default=sa.text("now()"))
    op.create_unique_constraint("uq_agent_runs_id_history_at", "agent_runs", ["id", "history_at"])
    op.create_index(
        "ix_agent_runs_unfinished",
        "agent_runs",
        ["history_at"],
        postgresql_where=sa.text(f"status NOT IN ({TERMINAL}) AND history_at IS NOT NULL"),
    )

    op.execute("DROP TRIGGER run_events_webhook_outbox ON run_events")
    op.execute("ALTER TABLE run_events RENAME TO run_events_unpartitioned")
    op.execute("ALTER TABLE run_events_unpartitioned RENAME CONSTRAINT pk_run_events TO pk_run_events_unpartitioned")
    op.execute(
        "ALTER TABLE run_events_unpartitioned RENAME CONSTRAINT fk_run_events_run_id_agent_runs"
        " TO fk_run_events_unpartitioned_run_id_agent_runs"
    )
    op.execute(
        """
        CREATE TABLE run_events (
            run_id uuid NOT NULL,
            seq integer NOT NULL,
            type text NOT NULL,
            data jsonb NOT NULL DEFAULT '{}'::jsonb,
            attempt integer NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            history_at timestamptz NOT NULL,
            CONSTRAINT pk_run_events PRIMARY KEY (run_id, seq, history_at),
            CONSTRAINT fk_run_events_run_id_agent_runs FOREIGN KEY (run_id, history_at)
                REFERENCES agent_runs (id, history_at) ON DELETE CASCADE ON UPDATE CASCADE
        ) PARTITION BY RANGE (history_at)
        """
    )
    op.execute("CREATE TABLE run_events_default PARTITION OF run_events DEFAULT")
    today = datetime.now(UTC).date()
    has_history = op.get_bind().execute(sa.text("SELECT EXISTS (SELECT 1 FROM run_events_unpartitioned)")).scalar()
    if has_history:
        op.execute(
            f"CREATE TABLE run_events_before_{today:%Y%m%d} PARTITION OF run_events"
            f" FOR VALUES FROM (MINVALUE) TO ('{_midnight(today)}')"
        )
    for offset in range(DAYS_AHEAD + 1):
        day = today + timedelta(days=offset)
        op.execute(
            f"CREATE TABLE run_events_{day:%Y%m%d} PARTITION OF run_events"
            f" FOR VALUES FROM ('{_midnight(day)}') TO ('{_midnight(day + timedelta(days=1))}')"
        )
    op.execute(
        f"INSERT INTO run_events ({COLUMNS}, history_at)"
        f" SELECT {', '.join('e.' + c for c in COLUMNS.split(', '))}, r.history_at"
        "  FROM run_events_unpartitioned e JOIN agent_runs r ON r.id = e.run_id"
    )
    op.execute("DROP TABLE run_events_unpartitioned")
    op.execute(OUTBOX_TRIGGER)


def downgrade() -> None:
    op.execute("DROP TRIGGER run_events_webhook_outbox ON run_events")
    op.execute("ALTER TABLE run_events RENAME TO run_events_partitioned")
    op.execute("ALTER TABLE run_events_partitioned RENAME CONSTRAINT pk_run_events TO pk_run_events_partitioned")
    op.execute(
        "ALTER TABLE run_events_partitioned RENAME CONSTRAINT fk_run_events_run_id_agent_runs"
        " TO fk_run_events_partitioned_run_id_agent_runs"
    )
    op.execute(
        """
        CREATE TABLE run_events (
            run_id uuid NOT NULL,
            seq integer NOT NULL,
            type text NOT NULL,
            data jsonb NOT NULL DEFAULT '{}'::jsonb,
            attempt integer NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            CONSTRAINT pk_run_events PRIMARY KEY (run_id, seq),
            CONSTRAINT fk_run_events_run_id_agent_runs FOREIGN KEY (run_id)
                REFERENCES agent_runs (id) ON DELETE CASCADE
        )
        """
    )
    op.execute(f"INSERT INTO run_events ({COLUMNS}) SELECT {COLUMNS} FROM run_events_partitioned")
    op.execute("DROP TABLE run_events_partitioned")  # and every partition with it
    op.execute(OUTBOX_TRIGGER)
    op.drop_index("ix_agent_runs_unfinished", table_name="agent_runs")
    op.drop_constraint("uq_agent_runs_id_history_at", "agent_runs", type_="unique")
    op.drop_column("agent_runs", "history_at")
