"""Response and request bodies of the admin routes (docs/contract.md, section 4): what only operators see."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from app.api.schemas import Integral, RunOut, UsageOut, fields_of
from app.queue import QueueStats, WorkerView


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
    """A worker process, idle or not. The registry fields are null for a worker that holds
    leases but is not registered (a runq version before the registry, or a stalled worker the
    reaper has already forgotten)."""

    worker_id: str
    leases: list[LeaseOut]
    last_heartbeat_at: datetime | None = Field(
        description="the worker's last heartbeat; without a registry row, the newest renewal of its leases"
    )
    host: str | None
    pid: int | None
    version: str | None = Field(description="runq's package version the worker runs")
    slots: int | None = Field(description="its concurrency: runs it executes at once")
    slots_in_use: int | None = Field(description="run slots in use at its last heartbeat, claim or ending")
    started_at: datetime | None
    last_beat_at: datetime | None = Field(description="its last heartbeat (every RUNQ_HEARTBEAT_S, idle or not)")

    @classmethod
    def of(cls, worker: WorkerView) -> WorkerOut:
        beats = [lease["heartbeat_at"] for lease in worker.leases if lease["heartbeat_at"] is not None]
        leases = [LeaseOut(**(lease | {"run_id": str(lease["run_id"])})) for lease in worker.leases]
        last_heartbeat_at = worker.last_beat_at or max(beats, default=None)
        return cls(**fields_of(cls, worker, leases=leases, last_heartbeat_at=last_heartbeat_at))


class WorkerList(BaseModel):
    """Every worker that is up (registered by its heartbeat), idle ones included, and any
    other worker holding a lease."""

    items: list[WorkerOut]


class QueueSampleOut(BaseModel):
    at: datetime = Field(description="the minute the reaper sampled the queue")
    pending: int
    leased: int
    finished: int = Field(description="runs that reached a terminal status in the minute before `at`")


class StatsOut(BaseModel):
    by_status: dict[str, int]
    inflight_by_tenant: dict[str, int] = Field(description="leased runs per tenant")
    oldest_pending_age_s: float = Field(description="wait of the oldest runnable pending run")
    dead_last_hour: int
    usage_last_24h: dict[str, UsageOut] = Field(
        description="usage stored per tenant in the current hour and the 23 before it"
    )
    last_hour: list[QueueSampleOut] = Field(description="one sample a minute, oldest first")

    @classmethod
    def of(cls, stats: QueueStats) -> StatsOut:
        usage = {tenant: UsageOut.of(usage) for tenant, usage in stats.usage_last_24h.items()}
        last_hour = [QueueSampleOut(**fields_of(QueueSampleOut, sample)) for sample in stats.last_hour]
        return cls(**fields_of(cls, stats, usage_last_24h=usage, last_hour=last_hour))


class TenantLimitIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    max_inflight: Annotated[int, Field(ge=0, le=1_000_000, description="0 = no cap for this tenant"), Integral]


class TenantOut(BaseModel):
    tenant_id: str
    max_inflight: int | None = Field(description="this tenant's override; null = the default applies")
    default_max_inflight: int = Field(description="RUNQ_TENANT_MAX_INFLIGHT (0 = no cap)")
    effective_max_inflight: int = Field(description="the cap the claim applies (0 = no cap)")
