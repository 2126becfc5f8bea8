"""GET /agents and the input check of every create route: a bad input is ``422 invalid_input``
naming the failing fields, and nothing is stored (no run, no thread message, no schedule)."""

from __future__ import annotations

import textwrap
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.main import create_app
from app.settings import Settings
from tests.api_support import SECRET

MODULE = f"team_agents_{uuid.uuid4().hex[:8]}"  # a module in the current directory, as a team's
COUNTER = textwrap.dedent(
    '''
    class Counter:
        """Counts to `to`.

        Nothing else."""

        input_schema = {
            "type": "object",
            "required": ["to"],
            "properties": {"to": {"type": "integer", "minimum": 1}},
        }

        async def run(self, ctx):
            return {"counted": ctx.input["to"]}
    '''
)


@pytest.fixture
def settings(database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    (tmp_path / f"{MODULE}.py").write_text(COUNTER)
    monkeypatch.chdir(tmp_path)
    return Settings(database_url=database_url, secret_key=SECRET, agents={"counter": f"{MODULE}:Counter"})


@pytest.fixture
async def app(settings: Settings) -> AsyncIterator[FastAPI]:
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        yield app


async def _stored(engine: AsyncEngine) -> dict[str, int]:
    async with engine.connect() as conn:
        return {
            table: (await conn.execute(text(f"SELECT count(*) FROM {table} WHERE tenant_id = 'alice'"))).scalar_one()
            for table in ("agent_runs", "schedules", "threads")
        } | {"thread_messages": (await conn.execute(text("SELECT count(*) FROM thread_messages"))).scalar_one()}


async def test_agents_are_listed_with_their_input_schemas(client: httpx.AsyncClient, alice: dict[str, str]) -> None:
    response = await client.get("/agents", headers=alice)
    assert response.status_code == 200
    agents = {a["name"]: a for a in response.json()["items"]}
    assert list(agents) == ["counter", "demo", "openai"]
    assert agents["counter"]["description"] == "Counts to `to`."
    assert agents["counter"]["input_schema"]["properties"]["to"]["minimum"] == 1
    assert agents["demo"]["input_schema"]["properties"]["steps"]["type"] == "integer"
    assert {"prompt", "messages", "approve_tools"} <= set(agents["openai"]["input_schema"]["properties"])
    assert (await client.get("/agents")).status_code == 401


BAD = [
    pytest.param("demo", {"steps": "many"}, ["body", "input", "steps"], id="demo"),
    pytest.param("openai", {"prompt": "hi", "temperature": "hot"}, ["body", "input", "temperature"], id="openai"),
    pytest.param("openai", {}, ["body", "input"], id="openai-no-prompt"),
    pytest.param("counter", {"to": 0}, ["body", "input", "to"], id="json-schema"),
    pytest.param("counter", {}, ["body", "input"], id="json-schema-required"),
]


def _assert_invalid(response: httpx.Response, loc: list[Any]) -> None:
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["code"] == "invalid_input"
    assert problem["errors"][0]["loc"] == loc and problem["errors"][0]["msg"]


@pytest.mark.parametrize(("agent", "input", "loc"), BAD)
async def test_a_bad_input_stores_nothing_on_any_route(
    client: httpx.AsyncClient, alice: dict[str, str], engine: AsyncEngine, agent: str, input: dict[str, Any], loc: list[Any]
) -> None:
    thread = (await client.post("/threads", headers=alice)).json()["id"]
    before = await _stored(engine)
    body = {"agent": agent, "input": input}
    _assert_invalid(await client.post("/runs", json=body, headers=alice | {"Idempotency-Key": "k"}), loc)
    _assert_invalid(await client.post(f"/threads/{thread}/runs", json=body, headers=alice), loc)
    _assert_invalid(await client.post("/schedules", json=body | {"every_s": 60}, headers=alice), loc)
    assert await _stored(engine) == before


async def test_a_good_input_is_stored_as_sent(client: httpx.AsyncClient, alice: dict[str, str]) -> None:
    body = {"agent": "counter", "input": {"to": 2, "note": "extra fields pass"}}
    created = await client.post("/runs", json=body, headers=alice | {"Idempotency-Key": "k"})
    assert created.status_code == 201 and created.json()["input"] == body["input"]
    thread = (await client.post("/threads", headers=alice)).json()["id"]
    assert (await client.post(f"/threads/{thread}/runs", json=body, headers=alice)).status_code == 201
    assert (await client.post("/schedules", json=body | {"every_s": 60}, headers=alice)).status_code == 201
