"""``/langgraph`` assistants of one's own, in process: a tenant's only (another tenant's is a 404
on every route, and absent from its search and count); refusals are runq's problems with a
stable code, never a 500. The SDK round trip against both servers is
tests/langgraph_server/test_assistants.py."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest
from fastapi import FastAPI

from app.settings import Settings
from tests.api_support import SECRET
from tests.langgraph_server.conftest import CONFIG

TONED = str(uuid.uuid5(uuid.UUID("6ba7b821-9dad-11d1-80b4-00c04fd430c8"), "toned"))


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(database_url=database_url, secret_key=SECRET, poll_s=0.2, langgraph_config=CONFIG)


async def test_another_tenants_assistant_is_404_everywhere(
    app: FastAPI, client: httpx.AsyncClient, alice: dict[str, str], bob: dict[str, str]
) -> None:
    made = await client.post("/langgraph/assistants", json={"graph_id": "toned", "metadata": {"who": "alice"}}, headers=alice)
    assert made.status_code == 200, made.text
    path = f"/langgraph/assistants/{made.json()['assistant_id']}"
    for method, tail, body in (
        ("GET", "", None),
        ("GET", "/graph", None),
        ("GET", "/schemas", None),
        ("PATCH", "", {"metadata": {"who": "bob"}}),
        ("POST", "/versions", {}),
        ("POST", "/latest", {"version": 1}),
        ("DELETE", "", None),
    ):
        refused = await client.request(method, path + tail, json=body, headers=bob)
        assert (refused.status_code, refused.json()["code"]) == (404, "not_found"), f"{method} {tail}"
    search = {"metadata": {"who": "alice"}}
    assert (await client.post("/langgraph/assistants/search", json=search, headers=bob)).json() == []
    assert (await client.post("/langgraph/assistants/count", json=search, headers=bob)).json() == 0
    ran = await client.post("/langgraph/runs/wait", json={"assistant_id": made.json()["assistant_id"]}, headers=bob)
    assert (ran.status_code, ran.json()["code"]) == (422, "unknown_assistant")
    assert (await client.get(path, headers=alice)).json()["metadata"] == {"who": "alice"}


@pytest.mark.parametrize(
    ("method", "path", "body", "expected"),
    [
        ("POST", "/langgraph/assistants", {"graph_id": "nope"}, (404, "unknown_graph")),
        ("POST", "/langgraph/assistants", {}, (422, "validation_error")),
        ("POST", "/langgraph/assistants", {"graph_id": "toned", "assistant_id": "x"}, (422, "validation_error")),
        ("POST", "/langgraph/assistants", {"graph_id": "toned", "assistant_id": TONED}, (409, "assistant_exists")),
        ("POST", "/langgraph/assistants",
         {"graph_id": "toned", "config": {"configurable": {"a": 1}}, "context": {"a": 2}}, (400, "config_and_context")),
        ("PATCH", f"/langgraph/assistants/{TONED}", {}, (409, "default_assistant")),
        ("DELETE", f"/langgraph/assistants/{TONED}", None, (409, "default_assistant")),
        ("POST", f"/langgraph/assistants/{TONED}/latest", {"version": 1}, (409, "default_assistant")),
        ("POST", f"/langgraph/assistants/{uuid.UUID(int=1)}/latest", {"version": 0}, (422, "validation_error")),
        ("PATCH", f"/langgraph/assistants/{uuid.UUID(int=1)}", {"graph_id": "nope"}, (404, "unknown_graph")),
    ],
)  # fmt: skip
async def test_refusals_are_problems_with_a_code(
    client: httpx.AsyncClient, alice: dict[str, str], method: str, path: str, body: object, expected: tuple[int, str]
) -> None:
    response = await client.request(method, path, json=body, headers=alice)
    assert (response.status_code, response.json()["code"]) == expected, response.text
    assert response.headers["content-type"] == "application/problem+json"


async def test_a_version_made_latest_is_what_runs_see(client: httpx.AsyncClient, alice: dict[str, str]) -> None:
    made = (await client.post("/langgraph/assistants", json={"graph_id": "toned", "context": {"tone": "a"}}, headers=alice)).json()
    path = f"/langgraph/assistants/{made['assistant_id']}"
    for tone in ("b", "c"):
        await client.patch(path, json={"context": {"tone": tone}}, headers=alice)
    versions = (await client.post(f"{path}/versions", json={}, headers=alice)).json()
    assert [(v["version"], v["context"]) for v in versions] == [(3, {"tone": "c"}), (2, {"tone": "b"}), (1, {"tone": "a"})]
    assert (await client.post(f"{path}/latest", json={"version": 2}, headers=alice)).json()["context"] == {"tone": "b"}
    patched = (await client.patch(path, json={"name": "four"}, headers=alice)).json()
    assert (patched["version"], patched["context"], patched["name"]) == (4, {"tone": "b"}, "four")
    assert (await client.delete(path, headers=alice)).status_code == 204
    assert (await client.post(f"{path}/versions", json={}, headers=alice)).status_code == 404


async def test_concurrent_patches_each_make_a_version(client: httpx.AsyncClient, alice: dict[str, str]) -> None:
    made = (await client.post("/langgraph/assistants", json={"graph_id": "toned"}, headers=alice)).json()
    path = f"/langgraph/assistants/{made['assistant_id']}"
    patched = await asyncio.gather(
        *(client.patch(path, json={"metadata": {f"k{n}": n}}, headers=alice) for n in range(6))
    )
    assert sorted(r.json()["version"] for r in patched) == [2, 3, 4, 5, 6, 7], [r.text for r in patched]
    rolled = await asyncio.gather(
        *(client.post(f"{path}/latest", json={"version": v}, headers=alice) for v in (1, 2, 3, 4))
    )
    assert all(r.status_code == 200 for r in rolled), [r.text for r in rolled]
    assert (await client.get(path, headers=alice)).json()["version"] in (1, 2, 3, 4)


async def test_a_cron_of_an_assistant_carries_its_config(client: httpx.AsyncClient, alice: dict[str, str]) -> None:
    made = (await client.post("/langgraph/assistants", json={"graph_id": "toned", "context": {"tone": "dry"}}, headers=alice)).json()
    body = {"assistant_id": made["assistant_id"], "schedule": "0 9 * * *", "config": {"tags": ["t"]}}
    cron = await client.post("/langgraph/runs/crons", json=body, headers=alice)
    assert cron.status_code == 200, cron.text
    payload = cron.json()["payload"]
    assert (payload["assistant_id"], payload["context"]) == (made["assistant_id"], {"tone": "dry"})
    assert payload["config"] == {"configurable": {"tone": "dry"}, "tags": ["t"]}
    found = await client.post("/langgraph/runs/crons/search", json={"assistant_id": made["assistant_id"]}, headers=alice)
    assert [c["cron_id"] for c in found.json()] == [cron.json()["cron_id"]]
