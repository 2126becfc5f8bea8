"""API keys: ``rq_<random>`` shown once, stored only as a SHA-256 digest bound to one tenant."""

from __future__ import annotations

import hashlib
import secrets
import uuid
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.engine import create_engine

KEY_PREFIX = "rq_"

INSERT_KEY = text(
    "INSERT INTO api_keys (tenant_id, key_hash, prefix, is_admin)"
    " VALUES (:tenant_id, :key_hash, :prefix, :is_admin)"
)
FIND_LIVE_KEY = text(
    "SELECT id, tenant_id, is_admin FROM api_keys WHERE key_hash = :key_hash AND revoked_at IS NULL"
)


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: a tenant, possibly with admin rights."""

    tenant_id: str
    is_admin: bool = False
    key_id: uuid.UUID | None = None  # None for a stream token


def hash_key(key: str) -> str:
    # The keys are 256 random bits, so a plain digest is enough; no slow KDF is needed.
    return hashlib.sha256(key.encode()).hexdigest()


async def insert_key(engine: AsyncEngine, *, tenant_id: str, admin: bool = False) -> str:
    """Store a new key for ``tenant_id`` and return it; it cannot be read back later."""
    if not tenant_id.strip():
        raise ValueError("the tenant must not be empty")
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    params = {"tenant_id": tenant_id, "key_hash": hash_key(key), "prefix": key[:10], "is_admin": admin}
    async with engine.begin() as conn:
        await conn.execute(INSERT_KEY, params)
    return key


async def find_key(engine: AsyncEngine, key: str) -> Principal | None:
    """The principal of a live (unrevoked) key, or None."""
    if not key.startswith(KEY_PREFIX):
        return None
    async with engine.connect() as conn:
        row = (await conn.execute(FIND_LIVE_KEY, {"key_hash": hash_key(key)})).first()
    return Principal(tenant_id=row.tenant_id, is_admin=row.is_admin, key_id=row.id) if row else None


async def create_key(url: str, *, tenant_id: str, admin: bool = False) -> str:
    """``runq keys create``: one key on its own short-lived engine."""
    engine = create_engine(url, pool_size=1, application_name="runq-keys")
    try:
        return await insert_key(engine, tenant_id=tenant_id, admin=admin)
    finally:
        await engine.dispose()
