"""The webhook outbox is filled by a trigger on the run row, not on each event (docs/webhooks.md).

Migration 0006's trigger on ``run_events`` called its function for every outcome event
(``run.completed``, ``run.failed``, ``run.cancelled``, ``run.waiting``) to look the run up and
find, for almost every run, that it has no webhook. This one is on ``agent_runs``, and its
``WHEN`` clause reads the row the statement just wrote: a run without a webhook never calls it,
nor does an update that adds no event or leaves the run in a status no announced event goes
with (an outcome event is written with the status it announces: ``done``, ``dead``,
``cancelled``, ``waiting``), such as a claim or a token append. When called, it announces the
outcome events the statement added (the seqs after the row's previous ``last_event_seq``),
which it sees since an ``AFTER`` trigger runs once the whole statement, its event insert
included, is done.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-03
"""

from __future__ import annotations

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

# The channel as app/queue/channels.py names it for the listeners.
OUTBOX_FUNCTION = """
CREATE FUNCTION runq_webhook_outbox_of_run() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO webhook_deliveries (run_id, tenant_id, url, event_seq, event_type)
    SELECT NEW.id, NEW.tenant_id, NEW.webhook ->> 'url', e.seq, e.type
      FROM run_events e
     WHERE e.run_id = NEW.id AND e.history_at = NEW.history_at
       AND e.seq > OLD.last_event_seq AND e.seq <= NEW.last_event_seq
       AND e.type IN ('run.completed', 'run.failed', 'run.cancelled', 'run.waiting')
       AND NEW.webhook -> 'events' ? e.type
    ON CONFLICT (run_id, event_seq) DO NOTHING;
    IF FOUND THEN
        PERFORM pg_notify('runq_webhooks', '');
    END IF;
    RETURN NULL;
END
$$
"""
OUTBOX_TRIGGER = """
CREATE TRIGGER agent_runs_webhook_outbox AFTER UPDATE OF last_event_seq ON agent_runs FOR EACH ROW
  WHEN (NEW.webhook IS NOT NULL AND NEW.last_event_seq > OLD.last_event_seq
        AND NEW.status IN ('done', 'dead', 'cancelled', 'waiting'))
  EXECUTE FUNCTION runq_webhook_outbox_of_run()
"""
# Migration 0006's, frozen here for the downgrade.
EVENT_FUNCTION = """
CREATE FUNCTION runq_webhook_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO webhook_deliveries (run_id, tenant_id, url, event_seq, event_type)
    SELECT r.id, r.tenant_id, r.webhook ->> 'url', NEW.seq, NEW.type
      FROM agent_runs r
     WHERE r.id = NEW.run_id AND r.webhook -> 'events' ? NEW.type
    ON CONFLICT (run_id, event_seq) DO NOTHING;
    IF FOUND THEN
        PERFORM pg_notify('runq_webhooks', '');
    END IF;
    RETURN NULL;
END
$$
"""
EVENT_TRIGGER = """
CREATE TRIGGER run_events_webhook_outbox AFTER INSERT ON run_events FOR EACH ROW
  WHEN (NEW.type IN ('run.completed', 'run.failed', 'run.cancelled', 'run.waiting'))
  EXECUTE FUNCTION runq_webhook_outbox()
"""


def upgrade() -> None:
    op.execute("DROP TRIGGER run_events_webhook_outbox ON run_events")
    op.execute("DROP FUNCTION runq_webhook_outbox()")
    op.execute(OUTBOX_FUNCTION)
    op.execute(OUTBOX_TRIGGER)


def downgrade() -> None:
    op.execute("DROP TRIGGER agent_runs_webhook_outbox ON agent_runs")
    op.execute("DROP FUNCTION runq_webhook_outbox_of_run()")
    op.execute(EVENT_FUNCTION)
    op.execute(EVENT_TRIGGER)
