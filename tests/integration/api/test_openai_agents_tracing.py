"""An OpenAI Agents SDK run's spans in runq's trace: the SDK's trace, agent, model and function
spans become OpenTelemetry spans below the run's attempt, in the trace that began at the
request that created the run (both processes export to files, tests/fakes/traced.py)."""

from __future__ import annotations

import secrets
from pathlib import Path

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.api_support import SECRET, create_run, free_port, new_key
from tests.fakes import eventually
from tests.fakes.agents_sdk_agents import AGENTS
from tests.fakes.openai_server import FakeOpenAI, ToolCall, answer, calls
from tests.integration.api.test_tracing import _done, _ready, _spans, _stop, _traced

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")


async def test_the_sdks_spans_are_in_the_runs_trace(database_url: str, engine: AsyncEngine, tmp_path: Path) -> None:
    port = free_port()
    with FakeOpenAI() as server:
        server.script(calls(ToolCall("c1", "add", {"a": 1, "b": 2}), usage=(11, 4)), answer("3", usage=(17, 2)))
        env = {
            "RUNQ_DATABASE_URL": database_url, "RUNQ_SECRET_KEY": SECRET, "RUNQ_AGENTS": AGENTS,
            "RUNQ_OPENAI_BASE_URL": server.base_url, "RUNQ_OPENAI_API_KEY": "sk-test-0123456789abcdefghij",
            "RUNQ_POLL_S": "0.1",
        }  # fmt: skip
        api = _traced(tmp_path / "api.jsonl", "runq-api", tmp_path / "api.log", "uvicorn", "app.main:app", "--port", str(port), env=env)
        worker = _traced(tmp_path / "worker.jsonl", "runq-worker", tmp_path / "worker.log", "app.worker", "--concurrency", "1", env=env)
        caller_trace, caller_span = secrets.token_hex(16), secrets.token_hex(8)
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
                await eventually(lambda: _ready(client), within_s=120)  # the SDK takes seconds to import
                headers = await new_key(engine, "t1") | {"traceparent": f"00-{caller_trace}-{caller_span}-01"}
                run = await create_run(client, headers, agent="sdk-support", input={"prompt": "1+2?"})
                await eventually(lambda: _done(client, headers, run["id"]), within_s=120)
        finally:
            _stop(worker)
            _stop(api)

    trace = [s for s in _spans(tmp_path / "worker.jsonl") if s["trace_id"] == caller_trace]
    by_id = {s["span_id"]: s for s in trace}
    (attempt,) = [s for s in trace if s["name"] == "runq.attempt"]
    (sdk_trace,) = [s for s in trace if s["name"] == "openai_agents.trace"]
    assert sdk_trace["parent_id"] == attempt["span_id"]
    names = [s["name"] for s in trace if s["name"].startswith("openai_agents.")]
    assert {"openai_agents.agent", "openai_agents.function"} <= set(names)
    assert names.count("openai_agents.generation") == 2  # each model response, the live ones

    def below_the_attempt(span: dict[str, object]) -> bool:
        while span["parent_id"] in by_id:
            span = by_id[str(span["parent_id"])]
            if span is attempt:
                return True
        return False

    assert all(below_the_attempt(s) for s in trace if s["name"].startswith("openai_agents."))
    (function,) = [s for s in trace if s["name"] == "openai_agents.function"]
    assert function["attributes"]["openai_agents.name"] == "add"
    assert "openai_agents.input" not in function["attributes"]  # no tool input or output in the trace
