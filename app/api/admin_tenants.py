"""Operators' view of tenant limits (docs/limits.md): each tenant's limits and use, and its
overrides. Admin keys only, as every ``/admin`` route."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field

from app.api.admin import TenantPath
from app.api.auth import require_admin
from app.api.deps import Runtime, RuntimeDep
from app.api.params import Cursor, Limit, page_of
from app.api.problems import ApiProblem, problems
from app.api.schemas import Integral
from app.queue import LIMIT_NAMES, LimitDefaults, TenantUse

router = APIRouter(
    prefix="/admin",
    tags=["admin"],
    dependencies=[Depends(require_admin)],
    responses=problems(401, 403, 503),
)

Count = Annotated[int | None, Field(ge=0, le=1_000_000_000), Integral]


class TenantLimitsIn(BaseModel):
    """The limits to set; a field left out stays as it is, ``null`` returns it to the default,
    ``0`` means no limit (for ``create_burst``: twice the rate)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    create_per_s: Annotated[float | None, Field(ge=0, le=1_000_000, allow_inf_nan=False)] = None
    create_burst: Count = None
    max_pending: Count = None
    max_streams: Count = None
    max_inflight: Count = None
    max_schedules: Count = None


class LimitsOut(BaseModel):
    create_per_s: float = Field(description="runs created per second (0 = no limit)")
    create_burst: int = Field(description="creates at once: the token bucket's size (0 with no rate)")
    max_pending: int = Field(description="runs pending or waiting (0 = no limit)")
    max_streams: int = Field(description="event streams open (0 = no limit)")
    max_inflight: int = Field(description="runs leased at once, the claim's cap (0 = no limit)")
    max_schedules: int = Field(description="schedules (0 = no limit)")


class OverridesOut(BaseModel):
    create_per_s: float | None
    create_burst: int | None
    max_pending: int | None
    max_streams: int | None
    max_inflight: int | None
    max_schedules: int | None


class UseOut(BaseModel):
    pending: int = Field(description="runs pending or waiting")
    inflight: int = Field(description="runs leased")
    streams: int = Field(description="event streams open on any API process")
    schedules: int = Field(description="schedules, paused ones included")
    create_tokens: float | None = Field(description="creates the bucket allows right now; null: no rate limit")


class TenantLimitsOut(BaseModel):
    tenant_id: str
    overrides: OverridesOut = Field(description="this tenant's own limits; null = the default applies")
    defaults: LimitsOut = Field(description="RUNQ_TENANT_* of this API process")
    effective: LimitsOut = Field(description="the limits that apply to this tenant")
    use: UseOut

    @classmethod
    def of(cls, use: TenantUse, defaults: LimitDefaults) -> TenantLimitsOut:
        o = use.overrides

        def pick(name: str) -> float:
            value = o[name]
            return float(value if value is not None else getattr(defaults, name))

        rate = pick("create_per_s")
        burst = defaults.burst(rate, int(o["create_burst"]) if o["create_burst"] else None)
        effective = LimitsOut(
            create_per_s=rate,
            create_burst=burst,
            max_pending=int(pick("max_pending")),
            max_streams=int(pick("max_streams")),
            max_inflight=int(pick("max_inflight")),
            max_schedules=int(pick("max_schedules")),
        )
        return cls(
            tenant_id=use.tenant_id,
            overrides=OverridesOut.model_validate(dict(o)),
            defaults=LimitsOut(
                create_per_s=defaults.create_per_s,
                create_burst=defaults.burst(defaults.create_per_s, None),
                max_pending=defaults.max_pending,
                max_streams=defaults.max_streams,
                max_inflight=defaults.max_inflight,
                max_schedules=defaults.max_schedules,
            ),
            effective=effective,
            use=UseOut(
                pending=use.pending,
                inflight=use.inflight,
                streams=use.streams,
                schedules=use.schedules,
                create_tokens=(use.tokens if use.tokens is not None else float(burst)) if rate > 0 else None,
            ),
        )


class TenantLimitsPage(BaseModel):
    items: list[TenantLimitsOut]
    next_cursor: str | None = Field(description="pass back as `?cursor=` for the next page")


def _encode(tenant: str) -> str:
    return base64.urlsafe_b64encode(tenant.encode()).decode("ascii")


def _decode(cursor: str) -> str:
    try:
        tenant = base64.b64decode(cursor.encode("ascii"), altchars=b"-_", validate=True).decode()
    except (ValueError, UnicodeError, binascii.Error) as exc:
        raise ApiProblem(400, "invalid_cursor", "the cursor is not one this API handed out") from exc
    if not tenant or not tenant.isprintable():
        raise ApiProblem(400, "invalid_cursor", "the cursor is not one this API handed out")
    return tenant


@router.get("/tenants", response_model=TenantLimitsPage, responses=problems(400, 422))
async def list_tenants(
    runtime: RuntimeDep,
    limit: Limit = 50,
    cursor: Cursor = None,
) -> TenantLimitsPage:
    """Every tenant (with a key, an override or both), by name, with its limits and current use."""
    after = _decode(cursor) if cursor else None
    uses = await runtime.queue.tenant_use(after=after, limit=limit + 1)
    page, next_cursor = page_of(uses, limit, lambda use: _encode(use.tenant_id))
    return TenantLimitsPage(items=[TenantLimitsOut.of(u, runtime.queue.limits) for u in page], next_cursor=next_cursor)


@router.get("/tenants/{tenant}/limits", response_model=TenantLimitsOut, responses=problems(422))
async def get_tenant_limits(tenant: TenantPath, runtime: RuntimeDep) -> TenantLimitsOut:
    """One tenant's limits: its overrides, the defaults, those that apply, and its use now."""
    return await _tenant(runtime, tenant)


@router.put("/tenants/{tenant}/limits", response_model=TenantLimitsOut, responses=problems(400, 413, 422))
async def set_tenant_limits(tenant: TenantPath, body: TenantLimitsIn, runtime: RuntimeDep) -> TenantLimitsOut:
    """Set the limits the body names (`null`: back to the default, `0`: no limit). Every API
    process applies them from its next request on; workers see `max_inflight` within 5 s."""
    changes = {name: getattr(body, name) for name in LIMIT_NAMES if name in body.model_fields_set}
    await runtime.queue.set_tenant_limits(tenant, changes)
    return await _tenant(runtime, tenant)


async def _tenant(runtime: Runtime, tenant: str) -> TenantLimitsOut:
    (use,) = await runtime.queue.tenant_use(tenant_id=tenant, limit=1)
    return TenantLimitsOut.of(use, runtime.queue.limits)

