"""The store and crons of LangGraph's server API over the official Python SDK, against runq and
the reference alike: the items a graph's ``get_store()`` writes are the ones ``client.store``
reads; a cron's slot runs the assistant's graph in its thread (runq only: the slot is brought
forward in runq's database rather than waited for)."""

from __future__ import annotations

import uuid

import asyncpg
from langgraph_sdk.client import LangGraphClient

from app.db.url import asyncpg_dsn
from tests.langgraph_server.conftest import Server, runq_only
from tests.langgraph_server.support import WITHIN_S
from tests.worker_support import wait_until


async def test_items_round_trip(lg: LangGraphClient) -> None:
    ns = ["conformance", uuid.uuid4().hex]
    await lg.store.put_item(ns, key="a", value={"n": 1, "tag": "x"})
    await lg.store.put_item(ns, key="b", value={"n": 2, "tag": "y"}, ttl=60)
    item = await lg.store.get_item(ns, key="a")
    assert (item["namespace"], item["key"], item["value"]) == (ns, "a", {"n": 1, "tag": "x"})
    assert await lg.store.get_item(ns, key="missing") is None
    found = await lg.store.search_items(ns, filter={"tag": "y"})
    assert [(i["key"], i["value"]) for i in found["items"]] == [("b", {"n": 2, "tag": "y"})]
    assert sorted(i["key"] for i in (await lg.store.search_items(ns, limit=10))["items"]) == ["a", "b"]
    assert (await lg.store.list_namespaces(prefix=ns))["namespaces"] == [ns]
    await lg.store.delete_item(ns, key="a")
    assert await lg.store.get_item(ns, key="a") is None


async def test_a_graphs_get_store_writes_what_the_client_reads(lg: LangGraphClient) -> None:
    user = uuid.uuid4().hex
    for expected in (1, 2):  # two threads: the store spans them
        thread = await lg.threads.create()
        out = await lg.runs.wait(thread["thread_id"], "memory", input={"user": user, "visits": 0})
        assert out["visits"] == expected
    assert (await lg.store.get_item(["visits"], key=user))["value"] == {"visits": 2}


async def test_a_cron_slot_runs_the_graph_in_its_thread(server: Server, lg: LangGraphClient, database_url: str) -> None:
    runq_only(server, "the slot is brought forward in runq's database, not waited for")
    thread = await lg.threads.create()
    cron = await lg.crons.create_for_thread(thread["thread_id"], "counter", schedule="0 0 1 1 *", input={"count": 4})
    assert [c["cron_id"] for c in await lg.crons.search(thread_id=thread["thread_id"])] == [cron["cron_id"]]
    conn = await asyncpg.connect(asyncpg_dsn(database_url))
    try:  # its slot has come: the worker's reaper fires it
        await conn.execute("UPDATE schedules SET next_run_at = now() WHERE id = $1", uuid.UUID(cron["cron_id"]))
    finally:
        await conn.close()

    async def finished() -> bool:
        runs = await lg.runs.list(thread["thread_id"])
        return bool(runs) and runs[0]["status"] == "success"

    await wait_until(finished, within=WITHIN_S, what="the cron's run")
    assert (await lg.threads.get_state(thread["thread_id"]))["values"] == {"count": 50, "steps": ["one", "two"]}
    await lg.crons.delete(cron["cron_id"])
    assert await lg.crons.search(thread_id=thread["thread_id"]) == []
