"""Waiting for input end to end (docs/waits.md): the demo agent waits, the API resumes it, a real
worker runs it on; time-outs, cancels, concurrent resumes, attempts, tokens and bad input."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.domain import Status
from app.queue import NewRun, Queue
from tests.api_support import create_run
from tests.worker_support import check_event_log, in_process_worker, wait_finished, wait_until


@pytest.fixture
async def worker(database_url: str) -> AsyncIterator[None]:
    async with in_process_worker(database_url):
        yield


async def waiting(client: httpx.AsyncClient, headers: dict[str, str], run_id: str) -> dict[str, Any]:
    """The run once it is waiting."""

    async def probe() -> dict[str, Any] | None:
        run = (await client.get(f"/runs/{run_id}", headers=headers)).json()
        return run if run["status"] == "waiting" else None

    return await wait_until(probe, within=15, what=f"run {run_id} to wait")


async def resume(client: httpx.AsyncClient, headers: dict[str, str], run_id: str, **body: Any) -> httpx.Response:
    return await client.post(f"/runs/{run_id}/resume", json=body, headers=headers)


async def event_types(queue: Queue, run_id: str) -> list[str]:
    return [e.type for e in await queue.read_events(uuid.UUID(run_id))]


async def test_wait_resume_done(worker: None, client: httpx.AsyncClient, alice: dict[str, str], queue: Queue) -> None:
    run = await create_run(client, alice, input={"prompt": "deploy?", "steps": 1, "step_s": 0.01, "wait": "approval"})
    held = await waiting(client, alice, run["id"])
    point = held["waitpoint"]
    assert point["name"] == "approval" and point["payload"] == {"prompt": "deploy?"}
    assert point["expires_at"] is not None
    events = await queue.read_events(uuid.UUID(run["id"]))
    assert events[-1].type == "run.waiting"
    assert events[-1].data["waitpoint_id"] == point["waitpoint_id"]

    answer = await resume(client, alice, run["id"], waitpoint_id=point["waitpoint_id"], value={"approved": True})
    assert answer.status_code == 202, answer.text
    assert answer.json()["status"] in ("pending", "leased", "done")  # a worker may take it at once
    assert answer.json()["waitpoint"] is None

    done = await wait_finished(queue, uuid.UUID(run["id"]))
    assert done.status is Status.DONE
    assert done.output == {"text": "deploy?", "steps": 1, "resumed_with": {"approved": True}}
    events = await queue.read_events(done.id)
    check_event_log(events)
    kinds = [e.type for e in events if e.type != "message.delta"]
    # the resumed attempt starts from the checkpoint: the prompt and the step are not repeated
    assert kinds == [
        "run.queued", "run.started", "message.completed", "tool.call", "tool.result",
        "run.waiting", "run.resumed", "run.started", "run.completed",
    ]  # fmt: skip
    resumed = next(e for e in events if e.type == "run.resumed")
    assert resumed.data == {"waitpoint_id": point["waitpoint_id"], "value": {"approved": True}}


async def test_max_attempts_one_waits_three_times(database_url: str, queue: Queue) -> None:
    """Waits never count toward max_attempts; attempt numbers still grow (the agent waits three
    times in one run: one name, three occurrences)."""
    run, _ = await queue.enqueue(NewRun(tenant_id="t1", agent="three_waits", input={}, max_attempts=1))
    async with in_process_worker(database_url, agents={"three_waits": "tests.fakes.wait_agents:ThreeWaits"}):
        for expected in (1, 2, 3):

            async def waits(n: int = expected) -> bool:
                current = await queue.get_run(run.id, tenant_id=None)
                return current.status is Status.WAITING and current.wait_count == n

            await wait_until(waits, within=15, what=f"wait {expected}")
            await queue.resume(run.id, tenant_id="t1", value=expected * 10)
        done = await wait_finished(queue, run.id)
    assert done.status is Status.DONE, (done.error_code, done.error_message)
    assert done.output == {"values": [10, 20, 30]}
    events = await queue.read_events(run.id)
    check_event_log(events)
    assert [e.data["attempt"] for e in events if e.type == "run.started"] == [1, 2, 3, 4]
    assert done.attempts == 4 and done.max_attempts == 1


async def test_time_out(worker: None, client: httpx.AsyncClient, alice: dict[str, str], queue: Queue, engine: AsyncEngine) -> None:
    run = await create_run(client, alice, input={"steps": 0, "wait": "input", "wait_timeout_s": 3600})
    await waiting(client, alice, run["id"])
    async with engine.begin() as conn:  # the hour passes in SQL
        await conn.execute(
            text("UPDATE waitpoints SET expires_at = now() - interval '1 second' WHERE run_id = :id"),
            {"id": run["id"]},
        )
    done = await wait_finished(queue, uuid.UUID(run["id"]))
    assert done.status is Status.DONE
    assert done.output == {"text": "", "steps": 0, "timed_out": True}
    events = await queue.read_events(done.id)
    check_event_log(events)
    resumed = next(e for e in events if e.type == "run.resumed")
    assert resumed.data == {"waitpoint_id": resumed.data["waitpoint_id"], "timed_out": True}
    assert (await resume(client, alice, run["id"], value=1)).json()["code"] == "not_waiting"


async def test_cancel_while_waiting(worker: None, client: httpx.AsyncClient, alice: dict[str, str], queue: Queue) -> None:
    run = await create_run(client, alice, input={"steps": 0, "wait": "input"})
    await waiting(client, alice, run["id"])
    cancelled = await client.post(f"/runs/{run['id']}/cancel", headers=alice)
    assert cancelled.status_code == 202
    body = cancelled.json()
    assert body["status"] == "cancelled" and body["cancel_reason"] == "user" and body["waitpoint"] is None
    events = await queue.read_events(uuid.UUID(run["id"]))
    check_event_log(events)
    assert [e.type for e in events][-3:] == ["run.waiting", "run.cancel_requested", "run.cancelled"]
    late = await resume(client, alice, run["id"], value=1)
    assert late.status_code == 409 and late.json()["code"] == "not_waiting"


async def test_sixteen_concurrent_resumes_one_winner(
    client: httpx.AsyncClient, alice: dict[str, str], queue: Queue, database_url: str
) -> None:
    run = await create_run(client, alice, input={"steps": 0, "wait": "input"})
    async with in_process_worker(database_url):
        await waiting(client, alice, run["id"])
    answers = await asyncio.gather(*(resume(client, alice, run["id"], value=i) for i in range(16)))
    codes = sorted(a.status_code for a in answers)
    assert codes == [202] + [409] * 15
    assert {a.json()["code"] for a in answers if a.status_code == 409} == {"not_waiting"}
    kinds = await event_types(queue, run["id"])
    assert kinds.count("run.resumed") == 1
    winner = next(a for a in answers if a.status_code == 202).json()
    assert winner["status"] == "pending"


async def test_bad_resumes_change_nothing(
    worker: None, client: httpx.AsyncClient, alice: dict[str, str], bob: dict[str, str], queue: Queue
) -> None:
    run = await create_run(client, alice, input={"steps": 0, "wait": "input"})
    held = await waiting(client, alice, run["id"])
    before = await event_types(queue, run["id"])
    path = f"/runs/{run['id']}/resume"

    wrong = await resume(client, alice, run["id"], waitpoint_id=str(uuid.uuid4()), value=1)
    assert (wrong.status_code, wrong.json()["code"]) == (409, "not_waiting")
    not_json = await client.post(path, content=b"{not json", headers=alice | {"content-type": "application/json"})
    assert not_json.status_code == 400 and not_json.json()["code"] == "malformed_json"
    no_value = await client.post(path, json={"waitpoint_id": held["waitpoint"]["waitpoint_id"]}, headers=alice)
    assert no_value.status_code == 422
    huge = await client.post(path, json={"value": "x" * 300_000}, headers=alice)
    assert huge.status_code == 413
    unstorable = await client.post(path, content=b'{"value": "\\u0000"}', headers=alice | {"content-type": "application/json"})
    assert unstorable.status_code == 422
    other_tenant = await resume(client, bob, run["id"], value=1)
    assert other_tenant.status_code == 404

    read_only = (await client.post(f"/runs/{run['id']}/stream-token", headers=alice)).json()
    assert read_only["scopes"] == ["read"]
    refused = await client.post(f"{path}?token={read_only['token']}", json={"value": 1})
    assert refused.status_code == 403 and refused.json()["code"] == "insufficient_scope"

    assert await event_types(queue, run["id"]) == before
    still = (await client.get(f"/runs/{run['id']}", headers=alice)).json()
    assert still["status"] == "waiting" and still["waitpoint"] == held["waitpoint"]

    done = await create_run(client, alice, input={"steps": 0})
    await wait_finished(queue, uuid.UUID(done["id"]))
    finished = await resume(client, alice, done["id"], value=1)
    assert (finished.status_code, finished.json()["code"]) == (409, "not_waiting")


async def test_resume_scoped_token_for_that_run_only(
    worker: None, client: httpx.AsyncClient, alice: dict[str, str], queue: Queue
) -> None:
    first = await create_run(client, alice, input={"steps": 0, "wait": "input"})
    second = await create_run(client, alice, input={"steps": 0, "wait": "input"})
    await waiting(client, alice, first["id"])
    await waiting(client, alice, second["id"])
    token = (
        await client.post(f"/runs/{first['id']}/stream-token", json={"scopes": ["read", "resume"]}, headers=alice)
    ).json()
    assert token["scopes"] == ["read", "resume"]
    elsewhere = await client.post(f"/runs/{second['id']}/resume?token={token['token']}", json={"value": 1})
    assert elsewhere.status_code == 401
    ok = await client.post(f"/runs/{first['id']}/resume?token={token['token']}", json={"value": "yes"})
    assert ok.status_code == 202, ok.text
    done = await wait_finished(queue, uuid.UUID(first["id"]))
    assert done.output["resumed_with"] == "yes"
    bad_scope = await client.post(f"/runs/{first['id']}/stream-token", json={"scopes": ["write"]}, headers=alice)
    assert bad_scope.status_code == 422


async def test_interactive_run_waiting_with_nobody_watching_is_abandoned(
    database_url: str, queue: Queue, engine: AsyncEngine
) -> None:
    run, _ = await queue.enqueue(NewRun(
        tenant_id="t1", agent="demo", input={"steps": 0, "wait": "input"}, on_disconnect="cancel", disconnect_grace_s=3600)
    )
    async with in_process_worker(database_url):

        async def is_waiting() -> bool:
            return (await queue.get_run(run.id, tenant_id=None)).status is Status.WAITING

        await wait_until(is_waiting, within=15, what="the run to wait")
        async with engine.begin() as conn:  # the grace window passes in SQL
            await conn.execute(text("UPDATE agent_runs SET disconnect_grace_s = 0 WHERE id = :id"), {"id": run.id})
        done = await wait_finished(queue, run.id)
    assert (done.status, done.cancel_reason) == (Status.CANCELLED, "abandoned")
    kinds = await event_types(queue, str(run.id))
    assert kinds[-3:] == ["run.waiting", "run.cancel_requested", "run.cancelled"]


async def test_metrics_count_waits_and_resumes(worker: None, client: httpx.AsyncClient, alice: dict[str, str], queue: Queue) -> None:
    def sample(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    before = {k: sample(*k) for k in [("runq_waits_total",), ("runq_wait_seconds_count",)]}
    resumed_before = sample("runq_resumes_total", outcome="value")
    refused_before = sample("runq_resumes_total", outcome="not_waiting")
    run = await create_run(client, alice, input={"steps": 0, "wait": "input"})
    await waiting(client, alice, run["id"])
    assert (await queue.queue_depth()).waiting == 1
    assert sample("runq_waits_total") == before[("runq_waits_total",)] + 1
    assert (await resume(client, alice, run["id"], value=1)).status_code == 202
    assert (await resume(client, alice, run["id"], value=2)).status_code == 409
    assert sample("runq_resumes_total", outcome="value") == resumed_before + 1
    assert sample("runq_resumes_total", outcome="not_waiting") == refused_before + 1
    assert sample("runq_wait_seconds_count") == before[("runq_wait_seconds_count",)] + 1
    await wait_finished(queue, uuid.UUID(run["id"]))
    assert (await queue.queue_depth()).waiting == 0
    scrape = (await client.get("/metrics")).text
    assert 'runq_queue_depth{status="waiting"}' in scrape


async def test_a_wait_longer_than_a_year_is_refused(worker: None, queue: Queue) -> None:
    run, _ = await queue.enqueue(NewRun(tenant_id="t1", agent="demo", input={"steps": 0, "wait": "x", "wait_timeout_s": 1e12}))
    dead = await wait_finished(queue, run.id)
    assert (dead.status, dead.error_code) == (Status.DEAD, "invalid_input")
