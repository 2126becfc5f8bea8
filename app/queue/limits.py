"""Tenant limits (docs/limits.md): the overrides operators set, the open-stream slots, and each
tenant's use. The create check is in the enqueue statement itself (:mod:`app.queue.runs`)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from app.errors import LimitExceeded
from app.queue.ops import SET_TENANT_LIMIT
from app.queue.statements import statement
from app.queue.store import Store

TAKE_STREAM_SLOT = statement("take_stream_slot")
TOUCH_STREAM_SLOTS = statement("touch_stream_slots")
RELEASE_STREAM_SLOTS = statement("release_stream_slots")
SET_TENANT_LIMITS = statement("set_tenant_limits")
CLEAR_TENANT_LIMIT = statement("clear_tenant_limit")
TENANT_USE = statement("tenant_use")

# The limits an override can name; max_inflight is the claim's cap (tenant_limits), the rest are
# tenant_buckets' columns.
LIMIT_NAMES = ("create_per_s", "create_burst", "max_pending", "max_streams", "max_inflight", "max_schedules")


@dataclass(frozen=True, slots=True)
class TenantUse:
    """One tenant's overrides (None: the default applies) and what it uses now."""

    tenant_id: str
    overrides: Mapping[str, float | int | None]
    pending: int
    inflight: int
    streams: int
    schedules: int
    tokens: float | None  # the create bucket's level as last stored, refilled to now; None: full


class Limits(Store):
    async def take_stream_slot(self, tenant_id: str) -> uuid.UUID:
        """A new stream slot of the tenant, or :class:`LimitExceeded` at its ``max_streams``."""
        self.refusals.check(tenant_id, "stream")
        slot_id = uuid.uuid4()
        params = {
            "id": slot_id,
            "tenant_id": tenant_id,
            "max_streams": self.limits.max_streams,
            "ttl_s": self.presence_ttl_s,
        }
        async with self._statement() as conn:
            at_cap = (await conn.execute(TAKE_STREAM_SLOT, params)).scalar()
        if at_cap is not None:
            raise self.refusals.remember(
                "stream", LimitExceeded(tenant_id=tenant_id, limit="streams", quota=at_cap, retry_after_s=1.0)
            )
        return slot_id

    async def touch_stream_slots(self, ids: Sequence[uuid.UUID]) -> None:
        async with self._statement() as conn:
            await conn.execute(TOUCH_STREAM_SLOTS, {"ids": list(ids), "ttl_s": self.presence_ttl_s})

    async def release_stream_slots(self, ids: Sequence[uuid.UUID]) -> None:
        if ids:
            async with self._statement() as conn:
                await conn.execute(RELEASE_STREAM_SLOTS, {"ids": list(ids)})

    async def set_tenant_limits(self, tenant_id: str, changes: Mapping[str, float | int | None]) -> None:
        """Set the limits ``changes`` names (None: back to the default, 0: no limit)."""
        bucket = [name for name in LIMIT_NAMES if name != "max_inflight"]
        params: dict[str, object] = {"tenant_id": tenant_id}
        for name in bucket:
            params[name] = changes.get(name)
            params[f"set_{name}"] = name in changes
        async with self._tx() as conn:
            if any(name in changes for name in bucket):
                await conn.execute(SET_TENANT_LIMITS, params)
            if "max_inflight" in changes:
                inflight = changes["max_inflight"]
                if inflight is None:
                    await conn.execute(CLEAR_TENANT_LIMIT, {"tenant_id": tenant_id})
                else:
                    await conn.execute(SET_TENANT_LIMIT, {"tenant_id": tenant_id, "max_inflight": int(inflight)})
        self._limits_checked_at = float("-inf")

    async def tenant_use(
        self, *, tenant_id: str | None = None, after: str | None = None, limit: int = 50
    ) -> list[TenantUse]:
        """Tenants by name after ``after`` (or only ``tenant_id``), with their use."""
        params = {"tenant_id": tenant_id, "after": after, "limit": limit}
        async with self._statement() as conn:
            rows = (await conn.execute(TENANT_USE, params)).all()
        return [self._use(row) for row in rows]

    def _use(self, row: object) -> TenantUse:
        m = row._mapping  # type: ignore[attr-defined]
        overrides = {name: m[name] for name in LIMIT_NAMES}
        tokens = None
        rate = m["create_per_s"] if m["create_per_s"] is not None else self.limits.create_per_s
        if rate > 0 and m["refilled_s_ago"] is not None:
            burst = self.limits.burst(rate, m["create_burst"])
            tokens = min(float(burst), m["tokens"] + rate * max(0.0, m["refilled_s_ago"]))
        return TenantUse(m["tenant_id"], overrides, m["pending"], m["inflight"], m["streams"], m["schedules"], tokens)
