"""Workers register themselves: an idle worker is listed, a busy one shows its slots and
lease, SIGTERM unregisters it, and the reaper forgets a SIGKILLed one once it is stale."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.main import create_app
from app.queue import Queue
from app.settings import Settings
from tests.api_support import SECRET, new_key
from tests.chaos.conftest import SpawnWorker
from tests.worker_support import enqueue_demo, wait_until

pytestmark = pytest.mark.chaos

ENV = {"RUNQ_LEASE_S": "2", "RUNQ_HEARTBEAT_S": "0.3", "RUNQ_SHUTDOWN_GRACE_S": "0"}


@pytest.fixture
async def admin_get(database_url: str, engine: AsyncEngine) -> AsyncIterator[Any]:
    """``await admin_get()``: the items of GET /admin/workers, keyed by worker id."""
    app = create_app(Settings(database_url=database_url, secret_key=SECRET))
    headers = await new_key(engine, "ops", admin=True)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://runq.test") as client:

            async def get() -> dict[str, dict[str, Any]]:
                response = await client.get("/admin/workers", headers=headers)
                assert response.status_code == 200, response.text
                return {w["worker_id"]: w for w in response.json()["items"]}

            yield get


def runq_workers(database_url: str) -> list[dict[str, Any]]:
    env = os.environ | {"RUNQ_DATABASE_URL": database_url}
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", "workers", "--json"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


async def test_idle_then_busy_then_gone_after_sigterm(
    spawn_worker: SpawnWorker, queue: Queue, admin_get: Any, database_url: str
) -> None:
    worker = spawn_worker(concurrency=3, **ENV)
    idle = await wait_until(lambda: _of(admin_get, worker.pid), within=10, what="the idle worker listed")
    assert (idle["slots_in_use"], idle["slots"], idle["leases"]) == (0, 3, [])
    assert idle["version"] and idle["host"] and idle["worker_id"].split(":")[1] == str(worker.pid)
    assert idle["last_heartbeat_at"] == idle["last_beat_at"] and idle["started_at"] <= idle["last_beat_at"]
    [cli] = [w for w in runq_workers(database_url) if w["pid"] == worker.pid]
    assert (cli["worker_id"], cli["slots_in_use"], cli["slots"]) == (idle["worker_id"], 0, 3)

    run = await enqueue_demo(queue, prompt="keep me busy", steps=100, step_s=0.2)

    async def busy() -> dict[str, Any] | None:
        shown = await _of(admin_get, worker.pid)
        return shown if shown and shown["slots_in_use"] == 1 else None

    shown = await wait_until(busy, within=10, what="one slot in use")
    assert [lease["run_id"] for lease in shown["leases"]] == [str(run.id)]
    assert shown["last_beat_at"] > idle["last_beat_at"]

    worker.proc.send_signal(signal.SIGTERM)
    assert worker.proc.wait(timeout=10) == 0
    assert shown["worker_id"] not in await admin_get()  # gone at once, not after the reaper's pass


async def test_reaper_forgets_a_killed_worker_once_stale(
    spawn_worker: SpawnWorker, queue: Queue, admin_get: Any, engine: AsyncEngine
) -> None:
    worker = spawn_worker(concurrency=2, **ENV)
    shown = await wait_until(lambda: _of(admin_get, worker.pid), within=10, what="the worker listed")
    worker.sigkill()
    await queue.forget_stale_workers()
    assert shown["worker_id"] in await admin_get()  # not stale yet: a lease has not passed

    async with engine.begin() as conn:
        await conn.execute(
            text("UPDATE workers SET last_beat_at = now() - interval '1 minute' WHERE worker_id = :id"),
            {"id": shown["worker_id"]},
        )
    await queue.forget_stale_workers()
    assert shown["worker_id"] not in await admin_get()


async def _of(admin_get: Any, pid: int) -> dict[str, Any] | None:
    """The listed worker of process ``pid``, if listed."""
    return next((w for w in (await admin_get()).values() if w["pid"] == pid), None)
