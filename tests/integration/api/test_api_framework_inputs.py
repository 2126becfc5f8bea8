"""The framework agents' inputs are checked at create too: a PydanticAI agent and a LangGraph
graph with an input they cannot run are ``422 invalid_input`` on every create route, nothing stored."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.main import create_app
from app.settings import Settings
from tests.api_support import SECRET

pytest.importorskip("pydantic_ai")
pytest.importorskip("langgraph")

AGENTS = {"support": "tests.fakes.pydantic_agents:Support", "graph": "tests.fakes.langgraph_agents:CounterGraph"}


@pytest.fixture
async def app(database_url: str) -> AsyncIterator[FastAPI]:
    app = create_app(Settings(database_url=database_url, secret_key=SECRET, agents=AGENTS))
    async with app.router.lifespan_context(app):
        yield app


async def _runs(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        query = "SELECT (SELECT count(*) FROM agent_runs) + (SELECT count(*) FROM schedules)"
        return int((await conn.execute(text(query))).scalar_one())


@pytest.mark.parametrize("agent", sorted(AGENTS))
@pytest.mark.parametrize("input", [{}, {"prompt": 7}, {"messages": []}])
async def test_framework_agents_refuse_an_input_they_cannot_run(
    client: httpx.AsyncClient, alice: dict[str, str], engine: AsyncEngine, agent: str, input: dict[str, Any]
) -> None:
    thread = (await client.post("/threads", headers=alice)).json()["id"]
    before = await _runs(engine)
    body = {"agent": agent, "input": input}
    for path, extra in (("/runs", {}), (f"/threads/{thread}/runs", {}), ("/schedules", {"every_s": 60})):
        response = await client.post(path, json=body | extra, headers=alice)
        assert (response.status_code, response.json()["code"]) == (422, "invalid_input"), (path, response.text)
    assert await _runs(engine) == before
    listed = {a["name"]: a for a in (await client.get("/agents", headers=alice)).json()["items"]}
    assert "prompt" in listed[agent]["input_schema"]["properties"]
