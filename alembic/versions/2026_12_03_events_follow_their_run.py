"""A run's events follow it by trigger, not by foreign key (docs/schema.md).

The composite foreign key ``run_events (run_id, history_at) → agent_runs (id, history_at)``
checked every event row as it was inserted: a ``SELECT … FOR KEY SHARE`` of the run row, which
locks it and writes WAL, three times for a run that does nothing (two thirds of what inserting
an event cost: 21–28 µs with the check, 7–9 µs without, measured over 10,000 inserts). Every
statement that inserts events reads their ``history_at`` off the run row it updates or inserts
in the same statement, under that row's lock, so the check found nothing new.
What the key did besides, two triggers on ``agent_runs`` do: a deleted run takes its events
with it, and a run whose ``history_at`` moves (the reaper's re-homing, an admin requeue) moves
its events to that partition. No statement on the hot path deletes a run or sets ``history_at``,
so they cost it nothing; the unique ``(id, history_at)`` the key needed goes too, one index less
for every write of a run row.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-03
"""

from __future__ import annotations

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

FOLLOW_FUNCTION = """
CREATE FUNCTION runq_events_follow_run() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        DELETE FROM run_events WHERE run_id = OLD.id AND history_at = OLD.history_at;
    ELSE
        UPDATE run_events SET history_at = NEW.history_at
         WHERE run_id = OLD.id AND history_at = OLD.history_at;
    END IF;
    RETURN NULL;
END
$$
"""
TRIGGERS = (
    """CREATE TRIGGER agent_runs_events_deleted AFTER DELETE ON agent_runs FOR EACH ROW
  EXECUTE FUNCTION runq_events_follow_run()""",
    """CREATE TRIGGER agent_runs_events_rehomed AFTER UPDATE OF history_at ON agent_runs FOR EACH ROW
  WHEN (OLD.history_at IS DISTINCT FROM NEW.history_at)
  EXECUTE FUNCTION runq_events_follow_run()""",
)


def upgrade() -> None:
    op.drop_constraint("fk_run_events_run_id_agent_runs", "run_events", type_="foreignkey")
    op.drop_constraint("uq_agent_runs_id_history_at", "agent_runs", type_="unique")
    op.execute(FOLLOW_FUNCTION)
    for trigger in TRIGGERS:
        op.execute(trigger)


def downgrade() -> None:
    op.execute("DROP TRIGGER agent_runs_events_rehomed ON agent_runs")
    op.execute("DROP TRIGGER agent_runs_events_deleted ON agent_runs")
    op.execute("DROP FUNCTION runq_events_follow_run()")
    op.create_unique_constraint("uq_agent_runs_id_history_at", "agent_runs", ["id", "history_at"])
    op.create_foreign_key(
        "fk_run_events_run_id_agent_runs",
        "run_events",
        "agent_runs",
        ["run_id", "history_at"],
        ["id", "history_at"],
        ondelete="CASCADE",
        onupdate="CASCADE",
    )
