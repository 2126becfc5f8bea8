"""Webhook routes (docs/webhooks.md): the tenant's signing secret, a run's deliveries, and the
operators' list of deliveries with redelivery.

The URL of a run's or a schedule's webhook is checked here, through :func:`checked_webhook`,
before anything is stored; the sender checks it again before every delivery.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field

from app.api.admin import TENANT_PATTERN
from app.api.auth import Tenant, require_admin
from app.api.deps import RuntimeDep
from app.api.params import (
    Cursor,
    Limit,
    RunIdPath,
    decode_cursor,
    keyset_cursor,
    page_of,
    parse_id,
    uuid_path,
)
from app.api.problems import ApiProblem, problems
from app.api.schemas import ResponseModel, Webhook, response_model
from app.domain import Delivery
from app.guards.signing import SecretUnreadable, TenantSecrets
from app.guards.ssrf import UrlGuard, UrlRefused

router = APIRouter(tags=["webhooks"])
admin_router = APIRouter(
    prefix="/admin", tags=["admin"], dependencies=[Depends(require_admin)], responses=problems(401, 403, 503)
)

DeliveryStatus = Literal["pending", "delivered", "failed", "stopped"]


async def url_guard(runtime: RuntimeDep) -> UrlGuard:
    """The SSRF guard as configured; a dependency so that tests can give it their own resolver."""
    settings = runtime.settings
    return UrlGuard(settings.webhook_allow_hosts, hosts_only=settings.webhook_hosts_only)


UrlGuardDep = Annotated[UrlGuard, Depends(url_guard)]


async def checked_webhook(webhook: Webhook | None, guard: UrlGuard) -> dict[str, Any] | None:
    """The webhook as stored (``{url, events}``, events once each), or 422 with the guard's code
    (``webhook_url_forbidden``, ``webhook_url_invalid``, ``webhook_url_too_long``, ...)."""
    if webhook is None:
        return None
    try:
        await guard.check(webhook.url)
    except UrlRefused as exc:
        raise ApiProblem(422, exc.code, exc.detail) from exc
    return {"url": webhook.url, "events": sorted(set(webhook.events))}


class SecretOut(BaseModel):
    secret: str = Field(description="`whsec_` and base64: the key of the webhook-signature HMAC")


@response_model(Delivery, status=DeliveryStatus)
class DeliveryOut(ResponseModel[Delivery]):
    """One delivery of a webhook; ``id`` is its `webhook-id` header, the same on every attempt."""


class DeliveryPage(BaseModel):
    items: list[DeliveryOut]
    next_cursor: str | None = Field(description="pass back as `?cursor=` for the next page")


def _page(deliveries: list[Delivery], limit: int) -> DeliveryPage:
    page, next_cursor = page_of(deliveries, limit, keyset_cursor)
    return DeliveryPage(items=[DeliveryOut.of(d) for d in page], next_cursor=next_cursor)


def _secrets(runtime: RuntimeDep) -> TenantSecrets:
    return TenantSecrets(runtime.queue, runtime.settings.secret_key or "")


def _unreadable(exc: SecretUnreadable) -> ApiProblem:
    return ApiProblem(
        409, "webhook_secret_unreadable", f"{exc}; rotate it (POST /webhook-secret/rotate) for a new one"
    )


@router.get("/webhook-secret", response_model=SecretOut, responses=problems(401, 409, 503))
async def get_secret(principal: Tenant, runtime: RuntimeDep) -> SecretOut:
    """The tenant's webhook signing secret, created on first use."""
    try:
        return SecretOut(secret=await _secrets(runtime).current(principal.tenant_id))
    except SecretUnreadable as exc:
        raise _unreadable(exc) from exc


@router.post("/webhook-secret/rotate", response_model=SecretOut, responses=problems(401, 503))
async def rotate_secret(principal: Tenant, runtime: RuntimeDep) -> SecretOut:
    """A new signing secret; for 24 h the old one also signs (a second `v1,` signature), so
    receivers can switch without losing a delivery."""
    return SecretOut(secret=await _secrets(runtime).rotate(principal.tenant_id))




@router.get("/runs/{run_id}/webhooks", response_model=DeliveryPage, responses=problems(400, 401, 404, 422, 503))
async def run_deliveries(
    principal: Tenant, run_id: RunIdPath, runtime: RuntimeDep, limit: Limit = 50, cursor: Cursor = None
) -> DeliveryPage:
    """The run's webhook deliveries, newest first."""
    run = await runtime.queue.get_run(run_id, tenant_id=principal.tenant_id)
    deliveries = await runtime.queue.list_deliveries(
        tenant_id=principal.tenant_id,
        run_id=run.id,
        limit=limit + 1,
        before=decode_cursor(cursor) if cursor else None,
    )
    return _page(deliveries, limit)


@admin_router.get("/webhooks", response_model=DeliveryPage, responses=problems(400, 422))
async def list_deliveries(
    runtime: RuntimeDep,
    status: DeliveryStatus | None = None,
    tenant: Annotated[str | None, Query(min_length=1, max_length=200, pattern=TENANT_PATTERN)] = None,
    run_id: uuid.UUID | None = None,
    limit: Limit = 50,
    cursor: Cursor = None,
) -> DeliveryPage:
    """Deliveries of every tenant (or of one, or of one run), newest first; `?status=failed`
    lists what gave up."""
    deliveries = await runtime.queue.list_deliveries(
        tenant_id=tenant, status=status, run_id=run_id, limit=limit + 1,
        before=decode_cursor(cursor) if cursor else None,
    )  # fmt: skip
    return _page(deliveries, limit)


async def parse_delivery_id(
    delivery_id: Annotated[str, uuid_path("The delivery's id, its `webhook-id` (a UUID)")],
) -> uuid.UUID:
    return parse_id(delivery_id, "delivery")


@admin_router.post(
    "/webhooks/{delivery_id}/redeliver", status_code=202, response_model=DeliveryOut, responses=problems(404, 409, 422)
)
async def redeliver(delivery_id: Annotated[uuid.UUID, Depends(parse_delivery_id)], runtime: RuntimeDep) -> DeliveryOut:
    """Send a failed, stopped or delivered delivery again, with the same `webhook-id` and a
    fresh retry window; a pending one is 409 `not_redeliverable`."""
    return DeliveryOut.of(await runtime.queue.redeliver(delivery_id))
