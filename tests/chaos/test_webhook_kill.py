"""A worker SIGKILLed in the middle of a webhook request: the delivery's lease runs out and
another worker sends it again, with the same webhook-id (at least once, never lost)."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.guards.signing import TenantSecrets
from app.queue import NewRun, Queue
from tests.api_support import SECRET
from tests.chaos.conftest import SpawnWorker
from tests.webhook_support import HANG, Receiver, verify_signature
from tests.worker_support import wait_until

pytestmark = pytest.mark.chaos

ENV = {"RUNQ_SECRET_KEY": SECRET, "RUNQ_WEBHOOK_ALLOW_HOSTS": "127.0.0.1", "RUNQ_WEBHOOK_TIMEOUT_S": "3"}


async def test_sigkill_mid_delivery_redelivers_with_the_same_id(
    spawn_worker: SpawnWorker, queue: Queue, engine: AsyncEngine
) -> None:
    async with Receiver(answers=[HANG]) as receiver:
        run, _ = await queue.enqueue(NewRun(tenant_id="t1", agent="demo", input={}, webhook={"url": receiver.url, "events": ["run.cancelled"]}))
        first = spawn_worker(**ENV)
        await queue.request_cancel(run.id, tenant_id=None)
        await wait_until(lambda: receiver.hanging, within=20, what="the first request to arrive")
        first.sigkill()  # mid-request: nothing is settled
        spawn_worker(**ENV)

        async def delivered() -> tuple[str, int] | None:
            async with engine.connect() as conn:
                row = (await conn.execute(text("SELECT id::text, status, attempts FROM webhook_deliveries"))).one()
            return (row.id, row.attempts) if row.status == "delivered" else None

        delivery_id, attempts = await wait_until(delivered, within=30, what="the redelivery")
    assert attempts == 2
    assert [r.headers["webhook-id"] for r in receiver.requests] == [delivery_id, delivery_id]
    secret = await TenantSecrets(queue, SECRET).current("t1")
    assert all(verify_signature(secret, r.headers, r.body) for r in receiver.requests)
