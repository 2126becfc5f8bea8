"""AG-UI routes (docs/frontends-ag-ui.md) on the in-process app with a real worker: the stream,
``runId`` as the idempotency key, interrupts and resume entries, the resume extension, and the
problems each refusal answers with."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.queue import Queue
from tests.api_support import new_key
from tests.worker_support import in_process_worker, wait_until


@pytest.fixture
async def owner(engine: AsyncEngine) -> dict[str, str]:
    """A tenant of these tests' own: the in-process worker's metrics carry its name, and other
    tests look for theirs in /metrics."""
    return await new_key(engine, "ag-ui-owner")


@pytest.fixture
async def worker(database_url: str) -> AsyncIterator[None]:
    async with in_process_worker(database_url):
        yield


def body(text: str = "hi", **extra: Any) -> dict[str, Any]:
    return {
        "threadId": f"chat-{uuid.uuid4().hex[:8]}",
        "runId": str(uuid.uuid4()),
        "messages": [{"id": "u1", "role": "user", "content": text}],
        "forwardedProps": {"input": {"steps": 1, "step_s": 0}},
        "protocolVersion": "1.0",  # unknown fields are accepted
    } | extra


def frames(response: httpx.Response) -> list[tuple[int, dict[str, Any]]]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    assert "\r" not in response.text
    out = []
    for block in response.text.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n") if line and not line.startswith(":"))
        if lines:
            out.append((int(lines["id"]), json.loads(lines["data"])))
    return out


def without_pings(text: str) -> str:
    """A stream less its keep-alive comments, which come when they come."""
    blocks = text.split("\n\n")
    return "\n\n".join(b for b in blocks if not all(line.startswith(":") for line in b.split("\n") if line))


def without_ids(frames: list[tuple[int, dict[str, Any]]]) -> list[tuple[int, dict[str, Any]]]:
    """Frames less RUN_STARTED's and RUN_FINISHED's echo of the ids a stream was opened with."""
    return [(seq, {k: v for k, v in e.items() if k not in ("threadId", "runId")}) for seq, e in frames]


def runq_run(events: list[tuple[int, dict[str, Any]]]) -> dict[str, str]:
    value: dict[str, str] = next(e["value"] for _, e in events if e.get("name") == "runq.run")
    return value


async def test_a_run_streams_as_ag_ui_events(worker: None, client: httpx.AsyncClient, owner: dict[str, str]) -> None:
    sent = body("hello there")
    events = frames(await client.post("/ag-ui/demo", json=sent, headers=owner))
    assert events[0] == (0, {"type": "RUN_STARTED", "threadId": sent["threadId"], "runId": sent["runId"]})
    types = [e["type"] for _, e in events]
    assert types[-1] == "RUN_FINISHED" and events[-1][1]["result"]["text"] == "hello there"
    assert "TOOL_CALL_RESULT" in types and "null" not in json.dumps([e for _, e in events])
    ids = [seq for seq, _ in events]
    assert ids == sorted(ids)
    thread = (await client.get(f"/threads/{runq_run(events)['thread_id']}", headers=owner)).json()
    assert thread["last_run_id"] == runq_run(events)["run_id"]


async def test_the_thread_id_names_one_thread_and_the_run_id_one_run(
    worker: None, client: httpx.AsyncClient, owner: dict[str, str]
) -> None:
    first = body("one")
    a = frames(await client.post("/ag-ui/demo", json=first, headers=owner))
    again = frames(await client.post("/ag-ui/demo", json=first, headers=owner))
    assert again == a  # a repeat streams the same run, byte for byte
    second = body("two", threadId=first["threadId"])
    b = frames(await client.post("/ag-ui/demo", json=second, headers=owner))
    thread_id = runq_run(a)["thread_id"]
    assert runq_run(b)["thread_id"] == thread_id and runq_run(b)["run_id"] != runq_run(a)["run_id"]
    runs = (await client.get(f"/threads/{thread_id}/runs", headers=owner)).json()["items"]
    assert len(runs) == 2
    # a runq thread id names that thread
    third = body("three", threadId=thread_id)
    assert runq_run(frames(await client.post("/ag-ui/demo", json=third, headers=owner)))["thread_id"] == thread_id
    changed = first | {"messages": [{"id": "u1", "role": "user", "content": "other"}]}
    conflict = await client.post("/ag-ui/demo", json=changed, headers=owner)
    assert (conflict.status_code, conflict.json()["code"]) == (409, "idempotency_conflict")


async def test_an_interrupt_and_its_resume(worker: None, client: httpx.AsyncClient, owner: dict[str, str]) -> None:
    sent = body("ship it?", forwardedProps={"input": {"steps": 0, "wait": "approval"}})
    first = frames(await client.post("/ag-ui/demo", json=sent, headers=owner))
    outcome = first[-1][1]["outcome"]
    assert outcome["type"] == "interrupt"
    (interrupt,) = outcome["interrupts"]
    assert interrupt["reason"] == "approval" and interrupt["metadata"] == {"payload": {"prompt": "ship it?"}}
    entry = {"interruptId": interrupt["id"], "status": "cancelled"}
    resume = body(threadId=sent["threadId"], resume=[entry])
    second = frames(await client.post("/ag-ui/demo", json=resume, headers=owner))
    assert second[2][1] == {
        "type": "CUSTOM", "name": "runq.run.resumed",
        "value": {"waitpoint_id": interrupt["id"], "value": {"approved": False}},
    }  # fmt: skip
    assert second[2][0] == first[-1][0] + 1  # the stream starts at the run.resumed event
    assert second[-1][1]["result"]["resumed_with"] == {"approved": False}
    assert runq_run(second) == runq_run(first)
    repeat = frames(await client.post("/ag-ui/demo", json=resume, headers=owner))
    assert repeat == second  # the answered interrupt streams the same continuation
    other = await client.post("/ag-ui/demo", json=body(threadId=sent["threadId"], resume=[entry | {"interruptId": str(uuid.uuid4())}]), headers=owner)
    assert (other.status_code, other.json()["code"]) == (409, "not_waiting")


async def test_the_events_resume_after_an_id_by_either_run_id(
    worker: None, client: httpx.AsyncClient, owner: dict[str, str], bob: dict[str, str], queue: Queue
) -> None:
    sent = body("resume me")
    live = await client.post("/ag-ui/demo", json=sent, headers=owner)
    whole = frames(live)
    run_id = runq_run(whole)["run_id"]
    for name in (run_id, sent["runId"]):
        replay = await client.get(f"/ag-ui/runs/{name}/events", headers=owner)
        assert without_pings(replay.text) == without_pings(live.text)  # byte for byte: the client's runId
        cut = next(seq for seq, e in whole if e["type"] == "TOOL_CALL_START")
        for resumed in (
            frames(await client.get(f"/ag-ui/runs/{name}/events?after={cut}", headers=owner)),
            frames(await client.get(f"/ag-ui/runs/{name}/events", headers=owner | {"Last-Event-ID": str(cut)})),
        ):
            assert [e["type"] for _, e in resumed[:3]] == ["RUN_STARTED", "CUSTOM", "STEP_STARTED"]
            assert without_ids(resumed[3:]) == without_ids([f for f in whole if f[0] > cut])
        hidden = await client.get(f"/ag-ui/runs/{name}/events", headers=bob)
        assert (hidden.status_code, hidden.json()["code"]) == (404, "not_found")
    bad = await client.get(f"/ag-ui/runs/{run_id}/events", headers=owner | {"Last-Event-ID": "x"})
    assert (bad.status_code, bad.json()["code"]) == (400, "invalid_cursor")
    bad = await client.get("/ag-ui/runs/a%00b/events", headers=owner)
    assert (bad.status_code, bad.json()["code"]) == (422, "validation_error")
    assert await wait_until(lambda: queue.get_run(uuid.UUID(run_id), tenant_id=None), within=5)


@pytest.mark.parametrize(
    ("path", "sent", "status", "code"),
    [
        ("/ag-ui/nope", body(), 422, "unknown_agent"),
        ("/ag-ui/demo", body(messages=[{"id": "a", "role": "assistant", "content": "x"}]), 422, "no_user_message"),
        ("/ag-ui/demo", {"runId": "r", "messages": []}, 422, "validation_error"),
        ("/ag-ui/demo", body(resume=[{"interruptId": "x", "status": "resolved"}] * 2), 422, "one_interrupt"),
        ("/ag-ui/demo", body(resume=[{"interruptId": "not-a-waitpoint", "status": "resolved"}]), 409, "not_waiting"),
        ("/ag-ui/demo", body(forwardedProps={"input": {"x": "\u0000"}}), 422, "validation_error"),
        ("/ag-ui/demo", body(threadId="a\u0000b"), 422, "validation_error"),
        ("/ag-ui/demo", body(runId="a\u0000b"), 422, "validation_error"),
        ("/ag-ui/demo", body(resume=[{"interruptId": "a\u0000b", "status": "resolved"}]), 422, "validation_error"),
        ("/ag-ui/demo", body("x" * 100_001), 422, "validation_error"),
    ],
)
async def test_refusals_are_problems(
    client: httpx.AsyncClient, owner: dict[str, str], path: str, sent: dict[str, Any], status: int, code: str
) -> None:
    response = await client.post(path, json=sent, headers=owner)
    assert (response.status_code, response.json()["code"]) == (status, code), response.text
    assert response.headers["content-type"] == "application/problem+json"


async def test_without_a_key_is_401(client: httpx.AsyncClient) -> None:
    for response in (
        await client.post("/ag-ui/demo", json=body()),
        await client.get(f"/ag-ui/runs/{uuid.uuid4()}/events"),
    ):
        assert (response.status_code, response.json()["code"]) == (401, "unauthorized")


async def test_a_thread_token_reaches_its_own_thread_only(
    worker: None, client: httpx.AsyncClient, owner: dict[str, str]
) -> None:
    chat = f"chat-{uuid.uuid4().hex[:8]}"
    thread = (await client.post("/threads", json={"chat_id": chat}, headers=owner)).json()
    token = (await client.post(f"/threads/{thread['id']}/token", headers=owner)).json()["token"]
    browser = {"Authorization": f"Bearer {token}"}
    events = frames(await client.post("/ag-ui/demo", json=body("by token", threadId=chat), headers=browser))
    assert runq_run(events)["thread_id"] == thread["id"]
    replay = frames(await client.get(f"/ag-ui/runs/{runq_run(events)['run_id']}/events", headers=browser))
    assert replay[0][1]["threadId"] == chat  # the chat's own name, as the client sent it
    other = await client.post("/ag-ui/demo", json=body(threadId="another-chat"), headers=browser)
    assert (other.status_code, other.json()["code"]) == (401, "unauthorized")
    elsewhere = frames(await client.post("/ag-ui/demo", json=body("elsewhere"), headers=owner))
    outside = await client.get(f"/ag-ui/runs/{runq_run(elsewhere)['run_id']}/events", headers=browser)
    assert (outside.status_code, outside.json()["code"]) == (401, "unauthorized")
    limited = (await client.post(f"/threads/{thread['id']}/token", json={"scopes": ["read", "run"]}, headers=owner))
    resume = body(threadId=chat, resume=[{"interruptId": str(uuid.uuid4()), "status": "cancelled"}])
    refused = await client.post("/ag-ui/demo", json=resume, headers={"Authorization": f"Bearer {limited.json()['token']}"})
    assert (refused.status_code, refused.json()["code"]) == (403, "insufficient_scope")
