"""``/langgraph/store`` through the official Python SDK (``langgraph_sdk``'s ``client.store``):
the items a graph's ``get_store()`` sees, a tenant's only, answered as LangGraph's server answers
(a missing item ``null``, a put ``204``), and its refusals as problems with stable codes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI
from langgraph_sdk._async.client import LangGraphClient
from sqlalchemy.ext.asyncio import AsyncEngine

from app.agents.langgraph import RunqStore
from tests.api_support import new_key


def sdk(app: FastAPI, key: dict[str, str]) -> LangGraphClient:
    """The SDK's client on the app in process, with ``key`` as the SDK sends it (``x-api-key``)."""
    transport = httpx.ASGITransport(app, raise_app_exceptions=False)
    api_key = key["Authorization"].removeprefix("Bearer ")
    return LangGraphClient(
        httpx.AsyncClient(transport=transport, base_url="http://runq.test/langgraph", headers={"x-api-key": api_key})
    )


@pytest.fixture
async def alice_sdk(app: FastAPI, alice: dict[str, str]) -> AsyncIterator[LangGraphClient]:
    async with sdk(app, alice) as client:
        yield client


async def test_items_round_trip_through_the_sdk(alice_sdk: LangGraphClient, engine: AsyncEngine) -> None:
    store = alice_sdk.store
    await store.put_item(["memories", "ada"], key="m1", value={"text": "likes tea", "n": 1})
    await store.put_item(["memories", "ada"], key="m2", value={"text": "lives in Paris", "n": 2}, ttl=60)
    await store.put_item(["memories", "bob"], key="m1", value={"text": "likes coffee", "n": 3})
    item = await store.get_item(["memories", "ada"], key="m1")
    assert item["namespace"] == ["memories", "ada"] and item["value"] == {"text": "likes tea", "n": 1}
    assert set(item) == {"namespace", "key", "value", "created_at", "updated_at"}
    assert await store.get_item(["memories", "ada"], key="nope") is None
    found = await store.search_items(["memories"], filter={"n": {"$gte": 2}}, limit=5)
    assert sorted((i["namespace"][1], i["key"]) for i in found["items"]) == [("ada", "m2"), ("bob", "m1")]
    assert all(i["score"] is None for i in found["items"])
    assert len((await store.search_items(["memories"], limit=1, offset=2))["items"]) == 1
    assert (await store.list_namespaces(prefix=["memories"]))["namespaces"] == [["memories", "ada"], ["memories", "bob"]]
    assert (await store.list_namespaces(suffix=["bob"], max_depth=1))["namespaces"] == [["memories"]]
    await store.delete_item(["memories", "ada"], key="m1")
    assert await store.get_item(["memories", "ada"], key="m1") is None
    # the same items a graph of alice's sees with get_store()
    seen = await RunqStore(engine, tenant_id="alice").aget(("memories", "bob"), "m1")
    assert seen is not None and seen.value["text"] == "likes coffee"


async def test_another_tenants_items_are_invisible(app: FastAPI, alice_sdk: LangGraphClient, engine: AsyncEngine) -> None:
    await alice_sdk.store.put_item(["private"], key="k", value={"secret": 1})
    async with sdk(app, await new_key(engine, "bob")) as bob:
        assert await bob.store.get_item(["private"], key="k") is None
        assert (await bob.store.search_items(["private"]))["items"] == []
        assert (await bob.store.list_namespaces())["namespaces"] == []
        await bob.store.delete_item(["private"], key="k")  # 204, and alice's stays
    assert (await alice_sdk.store.get_item(["private"], key="k"))["value"] == {"secret": 1}


async def test_a_thread_token_cannot_reach_the_store(client: httpx.AsyncClient, alice: dict[str, str]) -> None:
    thread = (await client.post("/threads", json={}, headers=alice)).json()
    token = (await client.post(f"/threads/{thread['id']}/token", json={}, headers=alice)).json()["token"]
    response = await client.post("/langgraph/store/namespaces", json={}, headers={"x-api-key": token})
    assert response.status_code in (401, 403), response.text
    assert response.headers["content-type"] == "application/problem+json"


@pytest.mark.parametrize(
    ("method", "path", "body", "code"),
    [
        ("PUT", "/langgraph/store/items", {"namespace": ["a.b"], "key": "k", "value": {}}, "validation_error"),
        ("PUT", "/langgraph/store/items", {"namespace": [], "key": "k", "value": {}}, "validation_error"),
        ("PUT", "/langgraph/store/items", {"namespace": ["a"], "key": "k", "value": [1]}, "validation_error"),
        ("PUT", "/langgraph/store/items", {"namespace": ["a"], "key": "k", "value": {"s": "\u0000"}}, "validation_error"),
        ("PUT", "/langgraph/store/items", {"namespace": ["a"], "key": "k", "value": {}, "ttl": -1}, "validation_error"),
        ("POST", "/langgraph/store/items/search", {"filter": {"n": {"$near": 1}}}, "filter_invalid"),
        ("POST", "/langgraph/store/namespaces", {"max_depth": 0}, "validation_error"),
    ],
)
async def test_bad_bodies_are_problems(
    client: httpx.AsyncClient, alice: dict[str, str], method: str, path: str, body: object, code: str
) -> None:
    response = await client.request(method, path, json=body, headers=alice)
    assert response.status_code == 422, response.text
    assert response.json()["code"] == code


async def test_get_needs_a_well_formed_namespace(client: httpx.AsyncClient, alice: dict[str, str]) -> None:
    for params in ({"namespace": "a..b", "key": "k"}, {"namespace": "a"}):
        response = await client.get("/langgraph/store/items", params=params, headers=alice)
        assert response.status_code == 422 and response.json()["code"] == "validation_error"
