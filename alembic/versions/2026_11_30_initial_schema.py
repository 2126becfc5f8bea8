"""Initial schema: runs, their events, checkpoints, effects, presence, API keys, tenant caps.

Revision ID: 0001
Revises: 
Create Date: 2026-11-30 18:22:11.514320
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('agent_runs',
    sa.Column('id', sa.UUID(), server_default=sa.text('gen_random_uuid()'), nullable=False),
    sa.Column('tenant_id', sa.Text(), nullable=False),
    sa.Column('agent', sa.Text(), nullable=False),
    sa.Column('status', sa.Text(), server_default='pending', nullable=False),
    sa.Column('priority', sa.Integer(), server_default='0', nullable=False),
    sa.Column('attempts', sa.Integer(), server_default='0', nullable=False),
    sa.Column('max_attempts', sa.Integer(), nullable=False),
    sa.Column('available_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('queue_rank', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('locked_until', sa.DateTime(timezone=True), nullable=True),
    sa.Column('locked_by', sa.Text(), nullable=True),
    sa.Column('lease_id', sa.UUID(), nullable=True),
    sa.Column('leased_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('heartbeat_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('cancel_requested_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('cancel_reason', sa.Text(), nullable=True),
    sa.Column('budget_json', postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'{}'::jsonb"), nullable=False),
    sa.Column('input_json', postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'{}'::jsonb"), nullable=False),
    sa.Column('output', postgresql.JSONB(astext_type=sa.Text()), nullable=True),
    sa.Column('error_code', sa.Text(), nullable=True),
    sa.Column('error_message', sa.Text(), nullable=True),
    sa.Column('idempotency_key', sa.Text(), nullable=True),
    sa.Column('request_hash', sa.Text(), nullable=True),
    sa.Column('on_disconnect', sa.Text(), server_default='continue', nullable=False),
    sa.Column('disconnect_grace_s', sa.Float(), server_default='30', nullable=False),
    sa.Column('detached_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('last_event_seq', sa.Integer(), server_default='0', nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.CheckConstraint("on_disconnect IN ('continue', 'cancel')", name=op.f('ck_agent_runs_on_disconnect')),
    sa.CheckConstraint("status IN ('pending', 'leased', 'done', 'dead', 'cancelled')", name=op.f('ck_agent_runs_status')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_agent_runs')),
    postgresql_with={'fillfactor': '70'}
    )
    # The hot table is small but churns: vacuum it long before the default 20% of dead rows.
    op.execute(
        "ALTER TABLE agent_runs SET (autovacuum_vacuum_scale_factor = 0.01,"
        " autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0)"
    )
    op.create_index('ix_agent_runs_claim', 'agent_runs', ['queue_rank', 'created_at'], unique=False, postgresql_where=sa.text("status = 'pending'"))
    op.create_index('ix_agent_runs_finished', 'agent_runs', ['finished_at'], unique=False, postgresql_where=sa.text("status IN ('done', 'dead', 'cancelled')"))
    op.create_index('ix_agent_runs_interactive', 'agent_runs', ['created_at'], unique=False, postgresql_where=sa.text("on_disconnect = 'cancel' AND status IN ('pending', 'leased')"))
    op.create_index('ix_agent_runs_leased', 'agent_runs', ['tenant_id'], unique=False, postgresql_where=sa.text("status = 'leased'"))
    op.create_index('ix_agent_runs_tenant_created', 'agent_runs', ['tenant_id', sa.literal_column('created_at DESC'), sa.literal_column('id DESC')], unique=False)
    op.create_index('uq_agent_runs_idempotency', 'agent_runs', ['tenant_id', 'idempotency_key'], unique=True, postgresql_where=sa.text('idempotency_key IS NOT NULL'))
    op.create_table('api_keys',
    sa.Column('id', sa.UUID(), server_default=sa.text('gen_random_uuid()'), nullable=False),
    sa.Column('tenant_id', sa.Text(), nullable=False),
    sa.Column('key_hash', sa.Text(), nullable=False),
    sa.Column('prefix', sa.Text(), nullable=False),
    sa.Column('is_admin', sa.Boolean(), server_default=sa.text('false'), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('revoked_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_api_keys')),
    sa.UniqueConstraint('key_hash', name=op.f('uq_api_keys_key_hash'))
    )
    op.create_table('tenant_limits',
    sa.Column('tenant_id', sa.Text(), nullable=False),
    sa.Column('max_inflight', sa.Integer(), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.CheckConstraint('max_inflight >= 0', name=op.f('ck_tenant_limits_max_inflight')),
    sa.PrimaryKeyConstraint('tenant_id', name=op.f('pk_tenant_limits'))
    )
    op.create_table('run_checkpoints',
    sa.Column('run_id', sa.UUID(), nullable=False),
    sa.Column('state', postgresql.JSONB(astext_type=sa.Text()), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('event_seq', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['agent_runs.id'], name=op.f('fk_run_checkpoints_run_id_agent_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('run_id', name=op.f('pk_run_checkpoints'))
    )
    op.create_table('run_effects',
    sa.Column('run_id', sa.UUID(), nullable=False),
    sa.Column('key', sa.Text(), nullable=False),
    sa.Column('result', postgresql.JSONB(astext_type=sa.Text()), nullable=True),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['agent_runs.id'], name=op.f('fk_run_effects_run_id_agent_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('run_id', 'key', name=op.f('pk_run_effects'))
    )
    op.create_table('run_events',
    sa.Column('run_id', sa.UUID(), nullable=False),
    sa.Column('seq', sa.Integer(), nullable=False),
    sa.Column('type', sa.Text(), nullable=False),
    sa.Column('data', postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'{}'::jsonb"), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['agent_runs.id'], name=op.f('fk_run_events_run_id_agent_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('run_id', 'seq', name=op.f('pk_run_events'))
    )
    op.create_table('run_subscribers',
    sa.Column('run_id', sa.UUID(), nullable=False),
    sa.Column('subscriber_id', sa.UUID(), nullable=False),
    sa.Column('seen_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['agent_runs.id'], name=op.f('fk_run_subscribers_run_id_agent_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('run_id', 'subscriber_id', name=op.f('pk_run_subscribers'))
    )


def downgrade() -> None:
    op.drop_table('run_subscribers')
    op.drop_table('run_events')
    op.drop_table('run_effects')
    op.drop_table('run_checkpoints')
    op.drop_table('tenant_limits')
    op.drop_table('api_keys')
    op.drop_index('uq_agent_runs_idempotency', table_name='agent_runs', postgresql_where=sa.text('idempotency_key IS NOT NULL'))
    op.drop_index('ix_agent_runs_tenant_created', table_name='agent_runs')
    op.drop_index('ix_agent_runs_leased', table_name='agent_runs', postgresql_where=sa.text("status = 'leased'"))
    op.drop_index('ix_agent_runs_interactive', table_name='agent_runs', postgresql_where=sa.text("on_disconnect = 'cancel' AND status IN ('pending', 'leased')"))
    op.drop_index('ix_agent_runs_finished', table_name='agent_runs', postgresql_where=sa.text("status IN ('done', 'dead', 'cancelled')"))
    op.drop_index('ix_agent_runs_claim', table_name='agent_runs', postgresql_where=sa.text("status = 'pending'"))
    op.drop_table('agent_runs')
