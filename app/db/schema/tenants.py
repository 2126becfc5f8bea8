"""Tenants: their API keys, their limits and their hourly usage."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Integer,
    PrimaryKeyConstraint,
    Table,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import UUID

from app.db.schema.base import NOW, metadata

api_keys = Table(
    "api_keys",
    metadata,
    Column("id", UUID(as_uuid=True), primary_key=True, server_default=text("gen_random_uuid()")),
    Column("tenant_id", Text, nullable=False),
    Column("key_hash", Text, nullable=False, unique=True),
    Column("prefix", Text, nullable=False),
    Column("is_admin", Boolean, nullable=False, server_default=text("false")),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("revoked_at", DateTime(timezone=True)),
)

tenant_limits = Table(
    "tenant_limits",
    metadata,
    Column("tenant_id", Text, primary_key=True),
    Column("max_inflight", Integer, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    CheckConstraint("max_inflight >= 0", name="max_inflight"),
)

# What the worker's fenced statements added to runs' usage, per tenant and hour (the same
# statement as the run's own usage): tokens per tenant over 24 h read at most 25 rows a tenant.
tenant_usage_hourly = Table(
    "tenant_usage_hourly",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("hour", DateTime(timezone=True), nullable=False),
    Column("input_tokens", BigInteger, nullable=False, server_default="0"),
    Column("output_tokens", BigInteger, nullable=False, server_default="0"),
    Column("model_calls", BigInteger, nullable=False, server_default="0"),
    Column("tool_calls", BigInteger, nullable=False, server_default="0"),
    PrimaryKeyConstraint("tenant_id", "hour"),
)
