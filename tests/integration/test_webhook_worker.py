"""The webhook sender inside a real worker's ``serve``: a receiver that never answers costs the
sender a slot until its timeout, never a run."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.queue import NewRun, Queue
from tests.api_support import SECRET
from tests.webhook_support import HANG, Receiver
from tests.worker_support import in_process_worker, wait_finished, wait_until

RUNS = 12  # more than the sender's slots (8)


async def test_a_hanging_receiver_does_not_hold_up_runs(database_url: str, queue: Queue, engine: AsyncEngine) -> None:
    async with Receiver(default=HANG) as receiver:
        runs = [
            (await queue.enqueue(NewRun(tenant_id="t1", agent="demo", input={"steps": 1, "step_s": 0.01},
                                 webhook={"url": receiver.url, "events": ["run.completed"]})))[0]
            for _ in range(RUNS)
        ]  # fmt: skip
        async with in_process_worker(
            database_url, concurrency=4, secret_key=SECRET, webhook_allow_hosts=["127.0.0.1"], webhook_timeout_s=5.0
        ):
            await wait_until(lambda: receiver.hanging, within=15, what="a delivery to hang")
            for run in runs:
                assert (await wait_finished(queue, run.id, within=30)).status.value == "done"
            # every run is done while the sender's slots (8) still wait on the receiver
            assert len(receiver.requests) < RUNS

            async def retried() -> bool:
                async with engine.connect() as conn:
                    errors = (await conn.execute(text("SELECT last_error FROM webhook_deliveries"))).scalars().all()
                return "no answer within 5 s" in errors

            await wait_until(retried, within=15, what="a timed-out delivery to be scheduled again")
