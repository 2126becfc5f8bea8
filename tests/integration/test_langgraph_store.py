"""runq's LangGraph store (§17) through LangGraph's own ``BaseStore`` methods: items, search
with LangGraph's filters, namespaces, TTLs (time moved in SQL), a tenant's items invisible to
another, writes fenced by a run's lease, and ``get_store()`` in a graph's node. No public conformance suite exists for stores
(``langgraph-checkpoint-conformance`` covers savers only), so the cases follow the behaviour of
LangGraph's ``InMemoryStore``, which every case below also runs against."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, TypedDict

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.config import get_store
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.agents.langgraph import RunqStore
from app.domain import Finish
from app.errors import LeaseLost
from app.queue import Fence, NewRun, Queue
from app.queue.graph_store import GraphStore


@pytest.fixture(params=["runq", "memory"])
async def store(request: pytest.FixtureRequest, engine: AsyncEngine) -> AsyncIterator[BaseStore]:
    yield RunqStore(engine, tenant_id="t1") if request.param == "runq" else InMemoryStore()


async def test_put_get_replace_delete(store: BaseStore) -> None:
    await store.aput(("users", "u1"), "prefs", {"theme": "dark"})
    first = await store.aget(("users", "u1"), "prefs")
    assert first is not None and first.value == {"theme": "dark"} and first.namespace == ("users", "u1")
    await store.aput(("users", "u1"), "prefs", {"theme": "light"})
    second = await store.aget(("users", "u1"), "prefs")
    assert second is not None and second.value == {"theme": "light"}
    assert second.updated_at >= first.updated_at
    if isinstance(store, RunqStore):  # as LangGraph's PostgresStore (InMemoryStore makes it anew)
        assert second.created_at == first.created_at
    await store.adelete(("users", "u1"), "prefs")
    assert await store.aget(("users", "u1"), "prefs") is None
    assert await store.aget(("users",), "prefs") is None  # a namespace is a whole path


async def test_search_by_prefix_filter_limit_offset(store: BaseStore) -> None:
    for n in range(5):
        await store.aput(("docs", "u1", f"f{n % 2}"), f"k{n}", {"n": n, "tag": "even" if n % 2 == 0 else "odd",
                                                              "meta": {"lang": "en", "len": n}})
    await store.aput(("docs", "u2"), "other", {"n": 99, "tag": "even"})
    under = await store.asearch(("docs", "u1"), limit=10)
    assert sorted(i.key for i in under) == ["k0", "k1", "k2", "k3", "k4"]
    assert {i.key for i in await store.asearch(("docs",), filter={"tag": "even"}, limit=10)} == {"k0", "k2", "k4", "other"}
    assert {i.key for i in await store.asearch(("docs",), filter={"n": {"$gte": 3}}, limit=10)} == {"k3", "k4", "other"}
    assert {i.key for i in await store.asearch(("docs",), filter={"n": {"$gt": 1, "$lt": 4}}, limit=10)} == {"k2", "k3"}
    assert {i.key for i in await store.asearch(("docs", "u1"), filter={"tag": {"$ne": "even"}}, limit=10)} == {"k1", "k3"}
    assert {i.key for i in await store.asearch(("docs",), filter={"meta": {"lang": "en"}}, limit=10)} == {
        "k0", "k1", "k2", "k3", "k4"}  # fmt: skip
    assert await store.asearch(("docs",), filter={"missing": 1}, limit=10) == []
    pages = [await store.asearch(("docs", "u1"), limit=2, offset=o) for o in (0, 2, 4)]
    assert [len(p) for p in pages] == [2, 2, 1]
    assert len({i.key for p in pages for i in p}) == 5
    assert len(await store.asearch(("docs",), query="anything", limit=10)) == 6  # query: no index, accepted


async def test_namespaces_by_prefix_suffix_wildcard_and_depth(store: BaseStore) -> None:
    for ns in [("a", "b", "c"), ("a", "b", "d"), ("a", "x", "c"), ("z",)]:
        await store.aput(ns, "k", {"v": 1})
    assert await store.alist_namespaces() == [("a", "b", "c"), ("a", "b", "d"), ("a", "x", "c"), ("z",)]
    assert await store.alist_namespaces(prefix=("a", "b")) == [("a", "b", "c"), ("a", "b", "d")]
    assert await store.alist_namespaces(suffix=("c",)) == [("a", "b", "c"), ("a", "x", "c")]
    assert await store.alist_namespaces(prefix=("a", "*", "c")) == [("a", "b", "c"), ("a", "x", "c")]
    assert await store.alist_namespaces(max_depth=2) == [("a", "b"), ("a", "x"), ("z",)]
    assert await store.alist_namespaces(limit=2, offset=1) == [("a", "b", "d"), ("a", "x", "c")]


async def _expire(engine: AsyncEngine, key: str, *, in_s: float) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            text("UPDATE langgraph_store_items SET expires_at = now() + make_interval(secs => :s) WHERE key = :k"),
            {"s": in_s, "k": key},
        )


async def _expires_in(engine: AsyncEngine, key: str) -> float:
    async with engine.connect() as conn:
        return float((await conn.execute(
            text("SELECT extract(epoch FROM expires_at - now()) FROM langgraph_store_items WHERE key = :k"), {"k": key}
        )).scalar_one())  # fmt: skip


async def test_ttls_expire_refresh_on_read_and_are_swept(engine: AsyncEngine) -> None:
    store = RunqStore(engine, tenant_id="t1")
    await store.aput(("n",), "short", {"v": 1}, ttl=10)  # minutes
    await store.aput(("n",), "kept", {"v": 2}, ttl=None)
    assert 590 < await _expires_in(engine, "short") <= 600
    await _expire(engine, "short", in_s=30)
    assert await store.aget(("n",), "short", refresh_ttl=False) is not None
    assert await _expires_in(engine, "short") <= 30
    assert await store.aget(("n",), "short") is not None  # refresh_on_read by default
    assert await _expires_in(engine, "short") > 590
    await _expire(engine, "short", in_s=30)
    assert len(await store.asearch(("n",))) == 2 and await _expires_in(engine, "short") > 590
    await _expire(engine, "short", in_s=-1)
    assert await store.aget(("n",), "short") is None
    assert [i.key for i in await store.asearch(("n",))] == ["kept"]
    assert await GraphStore(engine).sweep_expired_store_items() == 1
    await store.aput(("n",), "short", {"v": 3})  # put again after expiry: a new item
    again = await store.aget(("n",), "short")
    assert again is not None and again.value == {"v": 3}


async def test_a_tenants_items_are_invisible_to_another(engine: AsyncEngine) -> None:
    mine, theirs = RunqStore(engine, tenant_id="t1"), RunqStore(engine, tenant_id="t2")
    await mine.aput(("shared", "name"), "k", {"owner": "t1"})
    await theirs.aput(("shared", "name"), "k", {"owner": "t2"})
    got = await theirs.aget(("shared", "name"), "k")
    assert got is not None and got.value == {"owner": "t2"}
    assert [i.value for i in await mine.asearch(("shared",))] == [{"owner": "t1"}]
    await theirs.adelete(("shared", "name"), "k")
    assert await mine.aget(("shared", "name"), "k") is not None
    assert await theirs.alist_namespaces() == []


class State(TypedDict):
    user: str
    seen: int


async def _remember(state: State) -> dict[str, Any]:
    store = get_store()
    before = await store.aget(("visits",), state["user"])
    seen = (before.value["count"] if before else 0) + 1
    await store.aput(("visits",), state["user"], {"count": seen})
    return {"seen": seen}


def _remember_sync(state: State) -> dict[str, Any]:
    store = get_store()
    before = store.get(("visits",), state["user"])
    seen = (before.value["count"] if before else 0) + 1
    store.put(("visits",), state["user"], {"count": seen})
    return {"seen": seen}


@pytest.mark.parametrize("node", [_remember, _remember_sync])
async def test_get_store_in_a_node_reads_and_writes_the_tenants_items(engine: AsyncEngine, node: Any) -> None:
    builder = StateGraph(State)
    builder.add_node("remember", node)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", END)
    store = RunqStore(engine, tenant_id="t1")
    graph = builder.compile(checkpointer=InMemorySaver(), store=store)
    for expected, thread in [(1, "a"), (2, "b")]:  # the store spans threads
        out = await graph.ainvoke({"user": "ada", "seen": 0}, {"configurable": {"thread_id": thread}})
        assert out["seen"] == expected
    assert await RunqStore(engine, tenant_id="t2").aget(("visits",), "ada") is None


async def test_a_write_under_a_lost_lease_changes_nothing(engine: AsyncEngine, queue: Queue) -> None:
    run, _ = await queue.enqueue(NewRun(tenant_id="t1", agent="demo", input={}, max_attempts=3))
    [claim] = await queue.claim_batch(worker_id="w:1:a", limit=1)
    fenced = RunqStore(engine, tenant_id="t1", fence=Fence(run.id, claim.lease_id))
    await fenced.aput(("n",), "k", {"v": 1})
    await queue.finish(run_id=run.id, lease_id=claim.lease_id, finish=Finish.done({}))  # the lease is gone
    with pytest.raises(LeaseLost):
        await fenced.aput(("n",), "k", {"v": 2})
    with pytest.raises(LeaseLost):
        await fenced.adelete(("n",), "k")
    kept = await RunqStore(engine, tenant_id="t1").aget(("n",), "k")
    assert kept is not None and kept.value == {"v": 1}


async def test_sync_methods_refuse_the_stores_own_loop(engine: AsyncEngine) -> None:
    store = RunqStore(engine, tenant_id="t1")
    with pytest.raises(RuntimeError, match="a-methods"):
        store.get(("n",), "k")
    await asyncio.to_thread(store.put, ("n",), "k", {"v": 1})  # off the loop: fine
    assert (await store.aget(("n",), "k")) is not None
