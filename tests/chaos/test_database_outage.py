"""PostgreSQL stops and comes back while runs are running (docs/contract.md, section 4; issue 5).

A server of the test's own (the shared one must stay up for the other tests), a real API
process and two real worker processes. While the database is down the API answers 503 and
the workers keep retrying; afterwards everything recovers by itself and no run is lost.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.api.keys import create_key
from app.db.embedded import EmbeddedPostgres
from app.db.migrate import upgrade
from app.domain import Event
from tests.api_support import ApiProcess, free_port
from tests.chaos.conftest import CHAOS_ENV, WorkerProcess
from tests.worker_support import check_event_log

pytestmark = pytest.mark.chaos

RUNS = 16
SLOTS = 8  # two workers, four each: every worker holds runs when the database goes
TERMINAL = {"done", "dead", "cancelled"}


@pytest.fixture
def database() -> Iterator[EmbeddedPostgres]:
    root = Path(tempfile.mkdtemp(prefix="runq-outage-", dir="/tmp"))
    root.chmod(0o755)  # the server may run as `nobody`, which must reach its data dir
    server = EmbeddedPostgres(root / "pgdata", port=free_port(), fast=True)
    try:
        upgrade(server.start())
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def processes(database: EmbeddedPostgres, tmp_path: Path) -> Iterator[tuple[ApiProcess, list[WorkerProcess]]]:
    env = os.environ | CHAOS_ENV | {"RUNQ_DATABASE_URL": database.url}
    api = ApiProcess(database.url, env={k: v for k, v in CHAOS_ENV.items() if k != "RUNQ_AGENTS"})
    workers = [WorkerProcess(i, env=env, concurrency=SLOTS // 2, logs=tmp_path) for i in range(2)]
    try:
        api.wait_ready()
        for worker in workers:
            worker.wait_ready()
        yield api, workers
    finally:
        api.stop()
        for worker in workers:
            worker.kill_all()


def wait(probe: Any, *, within: float, what: str) -> Any:
    deadline = time.monotonic() + within
    while not (result := probe()):
        assert time.monotonic() < deadline, f"timed out after {within} s waiting for {what}"
        time.sleep(0.1)
    return result


def all_runs(client: httpx.Client, admin: dict[str, str]) -> list[dict[str, Any]]:
    response = client.get("/admin/runs", params={"limit": 200}, headers=admin)
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


def answers(client: httpx.Client, path: str, status: int, headers: dict[str, str] | None = None) -> bool:
    try:
        return client.get(path, headers=headers).status_code == status
    except httpx.TransportError:
        return False


class Prober(threading.Thread):
    """Asks the API all through the outage; every answer must be a success or a 503, never a
    500 (a driver error that escaped) and never a hang."""

    def __init__(self, base_url: str, headers: dict[str, str]) -> None:
        super().__init__(daemon=True)
        self.client = httpx.Client(base_url=base_url, headers=headers, timeout=10)
        self.statuses: Counter[tuple[str, int | str]] = Counter()
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            for path in ("/readyz", "/runs", "/admin/stats"):
                try:
                    self.statuses[path, self.client.get(path).status_code] += 1
                except httpx.HTTPError as exc:
                    self.statuses[path, type(exc).__name__] += 1
            time.sleep(0.01)

    def stop(self) -> Counter[tuple[str, int | str]]:
        self.stopped.set()
        self.join(timeout=30)
        self.client.close()
        return self.statuses


def test_database_restart_in_the_middle_of_runs(
    database: EmbeddedPostgres, processes: tuple[ApiProcess, list[WorkerProcess]]
) -> None:
    api, workers = processes
    tenant = {"Authorization": f"Bearer {asyncio.run(create_key(database.url, tenant_id='acme'))}"}
    admin = {"Authorization": f"Bearer {asyncio.run(create_key(database.url, tenant_id='ops', admin=True))}"}
    port = database.url.rsplit(":", 1)[1].split("/")[0]

    with httpx.Client(base_url=api.base_url, timeout=10) as client:
        for i in range(RUNS):
            body = {"agent": "demo", "input": {"prompt": f"run {i}", "steps": 6, "step_s": 0.25}, "max_attempts": 10}
            assert client.post("/runs", json=body, headers=tenant).status_code == 201
        wait(lambda: sum(r["status"] == "leased" for r in all_runs(client, admin)) == SLOTS,
             within=20, what="every slot of both workers busy")

        prober = Prober(api.base_url, admin)
        prober.start()
        database.stop()
        down = client.get("/runs", headers=tenant)
        assert down.status_code == 503, down.text
        assert down.json()["code"] == "database_unavailable" and int(down.headers["retry-after"]) > 0
        assert client.post("/runs", json={"agent": "demo"}, headers=tenant).status_code == 503
        assert client.get("/admin/stats", headers=admin).status_code == 503
        assert client.get("/readyz").status_code == 503
        assert client.get("/healthz").status_code == 200
        for worker in workers:  # its heartbeat and its LISTEN connection notice, and go on
            wait(lambda w=worker: "lease renewal failed" in w.log() and "LISTEN connection lost" in w.log(),
                 within=15, what="the worker to notice the outage")

        database.start()
        assert database.url.rsplit(":", 1)[1].split("/")[0] == port
        wait(lambda: answers(client, "/readyz", 200), within=30, what="the API to be ready again")
        wait(lambda: answers(client, "/runs", 200, tenant), within=30, what="the API's pool to recover")
        statuses = prober.stop()
        assert {status for _, status in statuses} == {200, 503}, statuses

        late = client.post("/runs", json={"agent": "demo", "input": {"steps": 1, "step_s": 0.01}}, headers=tenant)
        assert late.status_code == 201, late.text
        runs = wait(lambda: (rs := all_runs(client, admin)) and all(r["status"] in TERMINAL for r in rs) and rs,
                    within=60, what="every run to finish")
        assert len(runs) == RUNS + 1
        assert {r["status"] for r in runs} == {"done"}, [(r["id"], r["status"], r["error_code"]) for r in runs]
        for run in runs:
            page = client.get(f"/runs/{run['id']}/events", params={"limit": 1000},
                              headers=tenant | {"Accept": "application/json"})
            check_event_log([event(e) for e in page.json()["items"]])
    for worker in workers:
        assert worker.proc.poll() is None, worker.log()  # recovered, not restarted
    assert api.proc.poll() is None


def event(item: dict[str, Any]) -> Event:
    return Event(
        seq=item["seq"], type=item["type"], data=item["data"], attempt=item["attempt"],
        created_at=datetime.fromisoformat(item["created_at"]),
    )
