"""API keys: ``rq_<random>`` shown once, stored only as a SHA-256 digest bound to one tenant."""

from __future__ import annotations

import hashlib
import secrets
import time
import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.autocommit import one_statement
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


# Known keys are remembered briefly, so a request costs no key lookup of its own; a revoked
# key (revoked_at set in SQL) is refused by every API process within KNOWN_KEY_TTL_S.
KNOWN_KEY_TTL_S = 10.0
KNOWN_KEYS_MAX = 10_000
_known: dict[str, tuple[float, Principal]] = {}


async def find_key(engine: AsyncEngine, key: str) -> Principal | None:
    """The principal of a live (unrevoked) key, or None."""
    if not key.startswith(KEY_PREFIX):
        return None
    digest = hash_key(key)
    cached = _known.get(digest)
    if cached is not None and cached[0] > time.monotonic():
        return cached[1]
    principal = await live_key(engine, key)
    if principal is None:
        _known.pop(digest, None)
        return None
    if len(_known) >= KNOWN_KEYS_MAX:
        _known.clear()
    _known[digest] = (time.monotonic() + KNOWN_KEY_TTL_S, principal)
    return principal


async def live_key(engine: AsyncEngine, key: str) -> Principal | None:
    """The principal of a live key as the database says now (:func:`find_key` without its cache)."""
    if not key.startswith(KEY_PREFIX):
        return None
    async with one_statement(engine) as conn:
        row = (await conn.execute(FIND_LIVE_KEY, {"key_hash": hash_key(key)})).first()
    return None if row is None else Principal(tenant_id=row.tenant_id, is_admin=row.is_admin, key_id=row.id)


async def create_key(url: str, *, tenant_id: str, admin: bool = False) -> str:
    """``runq keys create``: one key on its own short-lived engine."""
    engine = create_engine(url, pool_size=1, application_name="runq-keys")
    try:
        return await insert_key(engine, tenant_id=tenant_id, admin=admin)
    finally:
        await engine.dispose()


LIST_KEYS = text(
    "SELECT id, tenant_id, prefix, is_admin, created_at, revoked_at FROM api_keys"
    " WHERE (CAST(:tenant_id AS text) IS NULL OR tenant_id = :tenant_id) ORDER BY created_at"
)
# A key is named by its id or by the prefix `keys list` shows; revoking twice keeps the first time.
REVOKE_KEY = text(
    "UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())"
    " WHERE id::text = :key OR prefix = :key"
    " RETURNING id, tenant_id, prefix, is_admin, created_at, revoked_at"
)


@dataclass(frozen=True, slots=True)
class KeyInfo:
    """What ``runq keys list`` shows of a key: never the key, only its first characters."""

    id: uuid.UUID
    tenant_id: str
    prefix: str
    is_admin: bool
    created_at: datetime
    revoked_at: datetime | None


class KeyNotFound(LookupError):
    """No key has that id or prefix."""


class AmbiguousKey(LookupError):
    """Several keys share that prefix; name the key by its id."""


async def list_keys(url: str, *, tenant_id: str | None = None) -> list[KeyInfo]:
    engine = create_engine(url, pool_size=1, application_name="runq-keys")
    try:
        async with engine.connect() as conn:
            rows = (await conn.execute(LIST_KEYS, {"tenant_id": tenant_id})).all()
    finally:
        await engine.dispose()
    return [KeyInfo(**row._mapping) for row in rows]


async def revoke_key(url: str, key: str) -> KeyInfo:
    """Revoke the key with this id or prefix; API processes refuse it within KNOWN_KEY_TTL_S."""
    engine = create_engine(url, pool_size=1, application_name="runq-keys")
    try:
        async with engine.connect() as conn:
            rows = (await conn.execute(REVOKE_KEY, {"key": key})).all()
            if len(rows) > 1:
                await conn.rollback()
                raise AmbiguousKey(f"{len(rows)} keys start with {key!r}; revoke one by its id")
            await conn.commit()
    finally:
        await engine.dispose()
    if not rows:
        raise KeyNotFound(f"no API key with id or prefix {key!r}")
    return KeyInfo(**rows[0]._mapping)
