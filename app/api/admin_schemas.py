"""Response and request bodies of the admin routes (docs/contract.md, section 4): what only operators see."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from app.api.schemas import Integral, RunOut
from app.queue import QueueStats


class AdminRunOut(RunOut):
    """A run with the worker's lease fields, which tenants never see."""

    locked_by: str | None = Field(description="`host:pid:boot_id` of the worker holding the lease")
    locked_until: datetime | None


class AdminRunPage(BaseModel):
    items: list[AdminRunOut]
    next_cursor: str | None = Field(description="pass back as `?cursor=` for the next page")


class LeaseOut(BaseModel):
    run_id: str
    tenant_id: str
    attempt: int
    lease_age_s: float = Field(description="seconds since this claim")
    heartbeat_at: datetime | None = Field(description="the lease's last renewal")
    locked_until: datetime | None


class WorkerOut(BaseModel):
    worker_id: str
    leases: list[LeaseOut]
    last_heartbeat_at: datetime | None = Field(description="the newest renewal of any of its leases")

    @classmethod
    def of(cls, worker_id: str, leases: list[dict[str, Any]]) -> WorkerOut:
        beats = [lease["heartbeat_at"] for lease in leases if lease["heartbeat_at"] is not None]
        return cls(
            worker_id=worker_id,
            leases=[LeaseOut(**(lease | {"run_id": str(lease["run_id"])})) for lease in leases],
            last_heartbeat_at=max(beats, default=None),
        )


class WorkerList(BaseModel):
    """Workers holding at least one lease; an idle worker holds none and is not listed."""

    items: list[WorkerOut]


class StatsOut(BaseModel):
    by_status: dict[str, int]
    inflight_by_tenant: dict[str, int] = Field(description="leased runs per tenant")
    oldest_pending_age_s: float = Field(description="wait of the oldest runnable pending run")
    dead_last_hour: int

    @classmethod
    def of(cls, stats: QueueStats) -> StatsOut:
        return cls(
            by_status=stats.by_status,
            inflight_by_tenant=stats.inflight_by_tenant,
            oldest_pending_age_s=stats.oldest_pending_age_s,
            dead_last_hour=stats.dead_last_hour,
        )


class TenantLimitIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    max_inflight: Annotated[int, Field(ge=0, le=1_000_000, description="0 = no cap for this tenant"), Integral]


class TenantOut(BaseModel):
    tenant_id: str
    max_inflight: int | None = Field(description="this tenant's override; null = the default applies")
    default_max_inflight: int = Field(description="RUNQ_TENANT_MAX_INFLIGHT (0 = no cap)")
    effective_max_inflight: int = Field(description="the cap the claim applies (0 = no cap)")
