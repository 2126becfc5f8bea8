"""The webhook outbox and the tenants' sealed signing secrets (docs/webhooks.md).

Outbox rows are written by the ``agent_runs`` trigger of migration 0019, so no run statement
here or elsewhere knows about webhooks; these statements take due deliveries under a short
lease, settle each attempt fenced by its attempt number, and serve the admin views.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from app.domain import Delivery, Event
from app.errors import DeliveryNotFound, NotRedeliverable
from app.queue.codec import delivery_from_row, event_from_row, page_params
from app.queue.statements import statement
from app.queue.store import Store

CLAIM_DELIVERIES = statement("claim_deliveries")
SETTLE_DELIVERY = statement("settle_delivery")
LIST_DELIVERIES = statement("list_deliveries")
REDELIVER = statement("redeliver")
GET_DELIVERY = statement("get_delivery")
OLDEST_UNDELIVERED_AGE = statement("oldest_undelivered_age")
GET_WEBHOOK_SECRETS = statement("get_webhook_secrets")
CREATE_WEBHOOK_SECRET = statement("create_webhook_secret")
ROTATE_WEBHOOK_SECRET = statement("rotate_webhook_secret")

Outcome = Literal["delivered", "stopped", "failed", "retry"]


@dataclass(frozen=True, slots=True)
class DeliveryJob:
    """A delivery taken for one attempt, with the event it announces."""

    delivery: Delivery
    event: Event


@dataclass(frozen=True, slots=True)
class Settled:
    """Where an attempt left its delivery; ``None`` from :meth:`settle_delivery` means the
    attempt's lease had run out and another sender took the delivery over."""

    status: str
    delivered_at: datetime | None


class Webhooks(Store):
    async def claim_deliveries(self, *, batch: int, lease_s: float) -> list[DeliveryJob]:
        """Up to ``batch`` due deliveries, each leased for ``lease_s`` (the request's timeout
        and a margin): a sender that dies leaves them to be sent again once that passes."""
        async with self._statement() as conn:
            rows = (await conn.execute(CLAIM_DELIVERIES, {"batch": batch, "lease_s": lease_s})).all()
        return [DeliveryJob(delivery_from_row(row), event_from_row(row, prefix="event_")) for row in rows]

    async def settle_delivery(
        self,
        *,
        delivery_id: uuid.UUID,
        attempt: int,
        outcome: Outcome,
        status_code: int | None,
        error: str | None,
        delay_s: float,
        retry_for_s: float,
    ) -> Settled | None:
        """Record one attempt: ``delivered``, ``stopped``, ``failed``, or ``retry`` after
        ``delay_s`` while the delivery is younger than ``retry_for_s`` (then ``failed``)."""
        params = {
            "id": delivery_id,
            "attempt": attempt,
            "outcome": outcome,
            "status_code": status_code,
            "error": error,
            "delay_s": delay_s if outcome == "retry" else 0.0,
            "retry_for_s": retry_for_s,
        }
        async with self._statement() as conn:
            row = (await conn.execute(SETTLE_DELIVERY, params)).first()
        return None if row is None else Settled(row.status, row.delivered_at)

    async def list_deliveries(
        self,
        *,
        tenant_id: str | None,
        status: str | None = None,
        run_id: uuid.UUID | None = None,
        limit: int = 50,
        before: tuple[datetime, uuid.UUID] | None = None,
    ) -> list[Delivery]:
        """Newest first; ``before`` is the keyset cursor ``(created_at, id)`` of the last row seen."""
        params = {"tenant_id": tenant_id, "status": status, "run_id": run_id, **page_params(before, limit)}
        async with self._statement() as conn:
            rows = (await conn.execute(LIST_DELIVERIES, params)).all()
        return [delivery_from_row(r) for r in rows]

    async def redeliver(self, delivery_id: uuid.UUID) -> Delivery:
        """A settled delivery due again now, with the same ``webhook-id`` and a fresh retry
        window; :class:`NotRedeliverable` while it is still pending."""
        async with self._statement() as conn:
            row = (await conn.execute(REDELIVER, {"id": delivery_id})).first()
            if row is None:
                found = (await conn.execute(GET_DELIVERY, {"id": delivery_id})).first()
        if row is not None:
            return delivery_from_row(row)
        if found is None:
            raise DeliveryNotFound(str(delivery_id))
        raise NotRedeliverable(str(delivery_id))

    async def undelivered(self) -> tuple[float, int]:
        """``(age of the oldest pending delivery in seconds, pending deliveries)``, for metrics."""
        async with self._statement() as conn:
            row = (await conn.execute(OLDEST_UNDELIVERED_AGE)).one()
        return float(row.age_s), int(row.pending)

    async def sealed_webhook_secrets(self, tenant_id: str) -> tuple[str, str | None] | None:
        """The tenant's sealed current secret and the previous one while it still signs."""
        async with self._statement() as conn:
            row = (await conn.execute(GET_WEBHOOK_SECRETS, {"tenant_id": tenant_id})).first()
        return None if row is None else (row.secret, row.previous)

    async def create_webhook_secret(self, tenant_id: str, *, sealed: str) -> str:
        """Store the tenant's first secret; the sealed secret that won if another request raced."""
        async with self._statement() as conn:
            won = (await conn.execute(CREATE_WEBHOOK_SECRET, {"tenant_id": tenant_id, "secret": sealed})).scalar()
            if won is None:
                won = (await conn.execute(GET_WEBHOOK_SECRETS, {"tenant_id": tenant_id})).one().secret
        return str(won)

    async def rotate_webhook_secret(self, tenant_id: str, *, sealed: str, overlap_s: float) -> None:
        """Replace the tenant's secret; the old one keeps signing for ``overlap_s``."""
        params = {"tenant_id": tenant_id, "secret": sealed, "overlap_s": overlap_s}
        async with self._statement() as conn:
            await conn.execute(ROTATE_WEBHOOK_SECRET, params)
