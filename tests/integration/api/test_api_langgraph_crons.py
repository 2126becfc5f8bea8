"""``/langgraph`` crons through the official Python SDK (``client.crons``) are runq schedules:
created, searched, counted, updated, deleted; a slot fires one run of the assistant's graph
with the cron's run fields (moved in SQL, fired by the reaper's statement); what schedules do
not have is refused with a stable code; another tenant's cron is a 404."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from langgraph_sdk._async.client import LangGraphClient
from langgraph_sdk.errors import NotFoundError, UnprocessableEntityError
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.queue import Queue
from app.settings import Settings
from tests.api_support import SECRET, new_key
from tests.integration.api.test_api_langgraph_store import sdk
from tests.langgraph_server.conftest import CONFIG

COUNTER = str(uuid.uuid5(uuid.UUID("6ba7b821-9dad-11d1-80b4-00c04fd430c8"), "counter"))


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(database_url=database_url, secret_key=SECRET, poll_s=0.2, langgraph_config=CONFIG)


@pytest.fixture
async def lg(app: FastAPI, alice: dict[str, str]) -> AsyncIterator[LangGraphClient]:
    async with sdk(app, alice) as client:
        yield client


async def test_create_search_count_update_delete(lg: LangGraphClient) -> None:
    cron = await lg.crons.create("counter", schedule="0 9 * * *", input={"count": 2}, metadata={"team": "a"},
                                 timezone="Europe/Paris")  # fmt: skip
    assert (cron["assistant_id"], cron["schedule"], cron["timezone"], cron["enabled"]) == (COUNTER, "0 9 * * *", "Europe/Paris", True)
    assert cron["payload"]["input"] == {"count": 2} and cron["metadata"] == {"team": "a"}
    assert cron["thread_id"] is None and cron["next_run_date"]
    other = await lg.crons.create("counter", schedule="*/5 * * * *", input={"count": 7}, enabled=False)
    assert other["enabled"] is False

    found = await lg.crons.search(assistant_id="counter")
    assert [c["cron_id"] for c in found] == [other["cron_id"], cron["cron_id"]]  # newest first
    assert [c["cron_id"] for c in await lg.crons.search(sort_by="created_at", sort_order="asc")] == [
        cron["cron_id"], other["cron_id"]]  # fmt: skip
    assert [c["cron_id"] for c in await lg.crons.search(enabled=False)] == [other["cron_id"]]
    assert [c["cron_id"] for c in await lg.crons.search(metadata={"team": "a"})] == [cron["cron_id"]]
    assert await lg.crons.search(assistant_id="counter", select=["cron_id"], limit=1, offset=1) == [
        {"cron_id": cron["cron_id"]}]  # fmt: skip
    assert await lg.crons.count(assistant_id="counter") == 2
    assert await lg.crons.count(metadata={"team": "b"}) == 0

    updated = await lg.crons.update(other["cron_id"], schedule="0 0 1 1 *", input={"count": 8}, enabled=True)
    assert (updated["schedule"], updated["payload"]["input"], updated["enabled"]) == ("0 0 1 1 *", {"count": 8}, True)
    assert datetime.fromisoformat(updated["next_run_date"]).strftime("%m-%d %H:%M") == "01-01 00:00"  # its new slot

    await lg.crons.delete(cron["cron_id"])
    assert await lg.crons.count() == 1
    with pytest.raises(NotFoundError):
        await lg.crons.delete(cron["cron_id"])


async def test_a_slot_fires_one_run_of_the_graph_in_the_thread(lg: LangGraphClient, engine: AsyncEngine, queue: Queue) -> None:
    thread = await lg.threads.create()
    cron = await lg.crons.create_for_thread(thread["thread_id"], "counter", schedule="* * * * *", input={"count": 3},
                                            stream_mode=["values", "updates"])  # fmt: skip
    assert cron["thread_id"] == thread["thread_id"]
    async with engine.begin() as conn:  # its slot has come
        await conn.execute(text("UPDATE schedules SET next_run_at = now() - interval '1 second'"))
    fired = await queue.fire_due_schedules()
    assert len(fired.runs) == 1 and str(fired.runs[0][0]) == cron["cron_id"]
    run = await queue.get_run(fired.runs[0][1], tenant_id="alice")
    assert (run.agent, str(run.thread_id)) == ("counter", thread["thread_id"])
    assert run.input["input"] == {"count": 3} and run.input["stream_mode"] == ["values", "updates"]
    assert run.input["assistant_id"] == COUNTER
    assert (await queue.fire_due_schedules()).runs == []  # the slot made its run once
    runs = await lg.runs.list(thread["thread_id"])
    assert [r["run_id"] for r in runs] == [str(run.id)]


async def test_no_slot_after_the_end_time_fires(lg: LangGraphClient, engine: AsyncEngine, queue: Queue) -> None:
    ends = "2099-01-01T00:00:00+00:00"
    ending = await lg.crons.create("counter", schedule="* * * * *", end_time=datetime.fromisoformat(ends))
    assert ending["end_time"] == ends
    ended = await lg.crons.create("counter", schedule="* * * * *")
    async with engine.begin() as conn:  # both slots have come; the second cron ended before its slot
        await conn.execute(text("UPDATE schedules SET next_run_at = now() - interval '1 second'"))
        await conn.execute(text("UPDATE schedules SET ends_at = now() - interval '2 seconds' WHERE id = :id"),
                           {"id": uuid.UUID(ended["cron_id"])})  # fmt: skip
    assert [str(s) for s, _ in (await queue.fire_due_schedules()).runs] == [ending["cron_id"]]
    assert (await queue.next_schedule_due_in() or 0) > 0  # the ended one wakes no reaper
    reopened = await lg.crons.update(ended["cron_id"], end_time=None)  # no end any more: it fires
    assert reopened["end_time"] is None
    assert [str(s) for s, _ in (await queue.fire_due_schedules()).runs] == [ended["cron_id"]]


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"schedule": "not a cron"}, "invalid_cron"),
        ({"schedule": "0 9 * * *", "timezone": "Mars/Olympus"}, "unknown_timezone"),
        ({"schedule": "0 9 * * *", "on_run_completed": "keep"}, "cron_keep_unsupported"),
        ({"schedule": "0 9 * * *", "multitask_strategy": "reject"}, "cron_strategy_unsupported"),
        ({"schedule": "0 9 * * *", "webhook": "http://10.0.0.1/hook"}, "webhook_url_forbidden"),
    ],
)
async def test_what_schedules_cannot_do_is_refused(
    client: httpx.AsyncClient, alice: dict[str, str], body: dict[str, Any], code: str
) -> None:
    response = await client.post("/langgraph/runs/crons", json={"assistant_id": "counter"} | body, headers=alice)
    assert response.status_code == 422, response.text
    assert response.json()["code"] == code


async def test_another_tenants_crons_are_invisible(app: FastAPI, lg: LangGraphClient, engine: AsyncEngine) -> None:
    cron = await lg.crons.create("counter", schedule="0 9 * * *")
    async with sdk(app, await new_key(engine, "bob")) as bob:
        assert await bob.crons.search() == [] and await bob.crons.count() == 0
        with pytest.raises(NotFoundError):
            await bob.crons.update(cron["cron_id"], enabled=False)
        with pytest.raises(NotFoundError):
            await bob.crons.delete(cron["cron_id"])
        with pytest.raises(NotFoundError):  # alice's thread
            thread = await lg.threads.create()
            await bob.crons.create_for_thread(thread["thread_id"], "counter", schedule="0 9 * * *")
    assert (await lg.crons.search())[0]["enabled"] is True


async def test_an_unknown_assistant_is_a_422_and_matches_nothing(lg: LangGraphClient) -> None:
    with pytest.raises(UnprocessableEntityError):  # as a run's: the body names no graph served
        await lg.crons.create("nope", schedule="0 9 * * *")
    await lg.crons.create("counter", schedule="0 9 * * *")
    assert await lg.crons.search(assistant_id="nope") == [] and await lg.crons.count(assistant_id="nope") == 0
    with pytest.raises(UnprocessableEntityError):
        await lg.crons.search(sort_by="thread_id")
