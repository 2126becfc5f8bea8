"""Targeted wake-ups: a new run wakes about as many idle workers as it needs, not all of them.

Each worker listens on a channel of its own besides the broadcast one and registers it
(``workers.wake_channel``); its claims keep ``slots_in_use`` fresh. ``runq_wake_workers(n)``,
called by every statement that makes ``n`` runs claimable now, notifies the channels of workers
picked at random until their free slots cover ``n``; when the registered free slots do not
(every worker busy, none registered, a worker of an older version), it broadcasts on
``runq_runs`` as before. One function, so the choice is written once for all those statements.

Revision ID: 0012
Revises: 0009
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

WAKE_WORKERS = """
CREATE FUNCTION runq_wake_workers(runs bigint) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    picked record;
    woke boolean := false;
BEGIN
    IF runs IS NULL OR runs <= 0 THEN
        RETURN;
    END IF;
    FOR picked IN
        -- a random order spreads the runs; "before" is the free slots of the workers ahead
        SELECT f.wake_channel,
               coalesce(sum(f.free) OVER (ORDER BY f.pick ROWS BETWEEN UNBOUNDED PRECEDING
                                                               AND 1 PRECEDING), 0) AS before,
               sum(f.free) OVER () AS total
          FROM (SELECT wake_channel, slots - slots_in_use AS free, random() AS pick
                  FROM workers
                 WHERE wake_channel IS NOT NULL AND slots_in_use < slots) f
         ORDER BY f.pick
    LOOP
        -- too few registered free slots (or none): broadcast, so that every worker may help
        EXIT WHEN picked.total < runs OR picked.before >= runs;
        PERFORM pg_notify(picked.wake_channel, '');
        woke := true;
    END LOOP;
    IF NOT woke THEN
        PERFORM pg_notify('runq_runs', '');
    END IF;
END $$
"""


def upgrade() -> None:
    op.add_column("workers", sa.Column("wake_channel", sa.Text(), nullable=True))
    op.execute(WAKE_WORKERS)


def downgrade() -> None:
    op.execute("DROP FUNCTION runq_wake_workers(bigint)")
    op.drop_column("workers", "wake_channel")
