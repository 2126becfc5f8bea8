"""One run's trace across two processes: the API's request, then the worker's claim, attempt,
model call and tool call, linked by the ``traceparent`` stored on the run (docs/usage.md).

Both processes run with the SDK's in-memory exporter (``tests/fakes/traced.py``), each span also
appended to a file per process; the test joins the two files on trace and span ids.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.queue import Queue
from tests.api_support import ROOT, SECRET, create_run, free_port, new_key
from tests.fakes import eventually
from tests.fakes.openai_server import FakeOpenAI, ToolCall, answer, calls

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

Span = dict[str, Any]


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


def _traced(spans: Path, service: str, log: Path, *command: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.fakes.traced", str(spans), service, *command],
            cwd=ROOT,
            env=os.environ | env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _spans(path: Path) -> list[Span]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    proc.wait(timeout=20)


async def test_one_trace_from_the_request_through_the_worker(
    database_url: str, engine: AsyncEngine, server: FakeOpenAI, tmp_path: Path
) -> None:
    server.script(
        calls(ToolCall("c1", "shell", {"command": "echo traced"}), usage=(11, 4)),
        answer("done", usage=(17, 2)),
    )
    port = free_port()
    env = {
        "RUNQ_DATABASE_URL": database_url,
        "RUNQ_SECRET_KEY": SECRET,
        "RUNQ_OPENAI_BASE_URL": server.base_url,
        "RUNQ_OPENAI_API_KEY": "sk-test-0123456789abcdefghij",
        "RUNQ_POLL_S": "0.1",
        "RUNQ_LOG_LEVEL": "debug",
        "RUNQ_LOG_FORMAT": "json",
    }
    api = _traced(tmp_path / "api.jsonl", "runq-api", tmp_path / "api.log",
                  "uvicorn", "app.main:app", "--port", str(port), env=env)
    worker = _traced(tmp_path / "worker.jsonl", "runq-worker", tmp_path / "worker.log",
                     "app.worker", "--concurrency", "1", env=env)
    caller_trace, caller_span = secrets.token_hex(16), secrets.token_hex(8)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            await eventually(lambda: _ready(client), within_s=30)
            headers = await new_key(engine, "t1") | {"traceparent": f"00-{caller_trace}-{caller_span}-01"}
            run = await create_run(client, headers, agent="openai", input={"prompt": "trace me", "tools": ["shell"]})
            run_id = uuid.UUID(run["id"])
            stored = await Queue(engine).get_run(run_id, tenant_id="t1")
            await eventually(lambda: _done(client, headers, run["id"]), within_s=30)
    finally:
        _stop(worker)
        _stop(api)

    api_spans, worker_spans = _spans(tmp_path / "api.jsonl"), _spans(tmp_path / "worker.jsonl")
    trace = [s for s in api_spans + worker_spans if s["trace_id"] == caller_trace]
    by_id = {s["span_id"]: s for s in trace}

    (request,) = [s for s in trace if s["name"] == "POST /runs"]
    assert request["service"] == "runq-api" and request["parent_id"] == caller_span
    # the run stores the request span's context, the worker's spans hang below it
    assert stored.traceparent == f"00-{caller_trace}-{request['span_id']}-01"

    (attempt,) = [s for s in trace if s["name"] == "runq.attempt"]
    assert attempt["service"] == "runq-worker" and attempt["parent_id"] == request["span_id"]
    assert attempt["attributes"]["runq.run_id"] == str(run_id)
    assert attempt["attributes"]["runq.ending"] == "done"
    (claim,) = [s for s in trace if s["name"] == "runq.claim"]
    assert claim["parent_id"] == attempt["span_id"]

    models = [s for s in trace if s["name"] == "runq.model_call"]
    assert [m["parent_id"] for m in models] == [attempt["span_id"]] * 2
    assert [(m["attributes"]["gen_ai.usage.input_tokens"], m["attributes"]["gen_ai.usage.output_tokens"])
            for m in models] == [(11, 4), (17, 2)]
    assert {m["attributes"]["gen_ai.request.model"] for m in models} == {server.requests[0].body["model"]}
    # the aiohttp instrumentation's request to the model sits below each model call
    http = [s for s in trace if s["parent_id"] in {m["span_id"] for m in models}]
    assert len(http) == 2 and all(s["name"].startswith("POST") for s in http)
    (tool,) = [s for s in trace if s["name"] == "runq.tool_call"]
    assert tool["parent_id"] == attempt["span_id"]
    assert tool["attributes"]["runq.tool.name"] == "shell" and tool["attributes"]["runq.tool.exit_code"] == 0

    # every span of the trace hangs off another span of it, up to the caller's
    assert all(s["parent_id"] in by_id or s["parent_id"] == caller_span for s in trace)
    # the worker's log lines inside the attempt carry the trace id
    lines = [json.loads(line) for line in (tmp_path / "worker.log").read_text().splitlines() if line.startswith("{")]
    assert any(line.get("run_id") == str(run_id) and line.get("trace_id") == caller_trace for line in lines)


async def test_without_tracing_the_callers_traceparent_is_stored(
    client: httpx.AsyncClient, engine: AsyncEngine, queue: Queue
) -> None:
    headers = await new_key(engine, "t1")
    header = f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"
    traced = await create_run(client, headers | {"traceparent": header})
    untraced = await create_run(client, headers | {"traceparent": "not a trace context"})

    assert (await queue.get_run(uuid.UUID(traced["id"]), tenant_id="t1")).traceparent == header
    assert (await queue.get_run(uuid.UUID(untraced["id"]), tenant_id="t1")).traceparent is None


async def _ready(client: httpx.AsyncClient) -> bool:
    try:
        return (await client.get("/readyz")).status_code == 200
    except httpx.TransportError:
        return False


async def _done(client: httpx.AsyncClient, headers: dict[str, str], run_id: str) -> bool:
    run = (await client.get(f"/runs/{run_id}", headers=headers)).json()
    assert run["status"] in ("pending", "leased", "done"), run
    return bool(run["status"] == "done")
