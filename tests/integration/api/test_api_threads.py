"""The thread routes (docs/threads.md): shapes, strategies, idempotency, deletion and bad input,
and a two-message conversation with the demo agent through a real worker."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from app.queue import Queue
from tests.api_support import RUN_FIELDS, RunDriver, wait_for
from tests.worker_support import in_process_worker

THREAD_FIELDS = {
    "id", "tenant_id", "metadata", "chat_id", "status", "created_at", "updated_at", "last_run_id", "message_count",
}  # fmt: skip
MESSAGE_FIELDS = {"index", "role", "content", "tool_calls", "tool_call_id", "run_id", "created_at"}


async def new_thread(client: httpx.AsyncClient, headers: dict[str, str], **body: Any) -> dict[str, Any]:
    response = await client.post("/threads", json=body or None, headers=headers)
    assert response.status_code == 201, response.text
    thread: dict[str, Any] = response.json()
    return thread


async def post_run(
    client: httpx.AsyncClient, headers: dict[str, str], thread_id: str, **body: Any
) -> httpx.Response:
    return await client.post(
        f"/threads/{thread_id}/runs", json={"agent": "demo", "input": {"steps": 0}} | body, headers=headers
    )


async def test_create_get_and_list_threads(client: httpx.AsyncClient, alice: dict[str, str]) -> None:
    first = await new_thread(client, alice)
    second = await new_thread(client, alice, metadata={"user": "u1", "n": [1, 2]})
    assert set(second) == THREAD_FIELDS
    assert (second["tenant_id"], second["metadata"], second["status"]) == ("alice", {"user": "u1", "n": [1, 2]}, "idle")
    assert (second["last_run_id"], second["message_count"]) == (None, 0)
    assert (await client.get(f"/threads/{first['id']}", headers=alice)).json() == first
    page = (await client.get("/threads", params={"limit": 1}, headers=alice)).json()
    assert [t["id"] for t in page["items"]] == [second["id"]]
    rest = (await client.get("/threads", params={"cursor": page["next_cursor"]}, headers=alice)).json()
    assert ([t["id"] for t in rest["items"]], rest["next_cursor"]) == ([first["id"]], None)


async def test_create_thread_is_idempotent(client: httpx.AsyncClient, alice: dict[str, str]) -> None:
    key = {"Idempotency-Key": "t-1"}
    first = await client.post("/threads", json={"metadata": {"a": 1}}, headers=alice | key)
    again = await client.post("/threads", json={"metadata": {"a": 1}}, headers=alice | key)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    other = await client.post("/threads", json={"metadata": {"a": 2}}, headers=alice | key)
    assert (other.status_code, other.json()["code"]) == (409, "idempotency_conflict")


async def test_thread_runs_carry_the_thread_and_wait_their_turn(
    client: httpx.AsyncClient, alice: dict[str, str], queue: Queue
) -> None:
    thread = await new_thread(client, alice)
    first = await post_run(client, alice, thread["id"])
    assert first.status_code == 201 and set(first.json()) == RUN_FIELDS
    assert first.json()["thread_id"] == thread["id"]
    second = (await post_run(client, alice, thread["id"], multitask_strategy="enqueue")).json()
    shown = (await client.get(f"/threads/{thread['id']}", headers=alice)).json()
    assert (shown["status"], shown["last_run_id"]) == ("busy", second["id"])
    runs = (await client.get(f"/threads/{thread['id']}/runs", params={"limit": 1}, headers=alice)).json()
    assert [r["id"] for r in runs["items"]] == [second["id"]]
    rest = (await client.get(f"/threads/{thread['id']}/runs", params={"cursor": runs["next_cursor"]}, headers=alice))
    assert [r["id"] for r in rest.json()["items"]] == [first.json()["id"]]
    assert (await client.get(f"/runs/{first.json()['id']}", headers=alice)).json()["thread_id"] == thread["id"]
    assert (await client.post("/runs", json={"agent": "demo"}, headers=alice)).json()["thread_id"] is None
    driver = RunDriver(queue)
    assert str((await driver.start()).run.id) == first.json()["id"]


async def test_reject_is_409_thread_busy_and_creates_nothing(client: httpx.AsyncClient, alice: dict[str, str]) -> None:
    thread = await new_thread(client, alice)
    assert (await post_run(client, alice, thread["id"], multitask_strategy="reject")).status_code == 201
    refused = await post_run(client, alice, thread["id"], multitask_strategy="reject")
    assert (refused.status_code, refused.json()["code"]) == (409, "thread_busy")
    assert refused.headers["content-type"] == "application/problem+json"
    assert len((await client.get(f"/threads/{thread['id']}/runs", headers=alice)).json()["items"]) == 1


async def test_two_concurrent_rejects_on_an_idle_thread_make_one_run(
    client: httpx.AsyncClient, alice: dict[str, str]
) -> None:
    thread = await new_thread(client, alice)
    answers = await asyncio.gather(*(post_run(client, alice, thread["id"], multitask_strategy="reject") for _ in range(2)))
    assert sorted(a.status_code for a in answers) == [201, 409]


@pytest.mark.parametrize(("strategy", "reason"), [("interrupt", "interrupted"), ("rollback", "rolled_back")])
async def test_interrupt_and_rollback_cancel_the_runs_in_flight(
    client: httpx.AsyncClient, alice: dict[str, str], queue: Queue, strategy: str, reason: str
) -> None:
    thread = await new_thread(client, alice)
    leased = (await post_run(client, alice, thread["id"])).json()
    pending = (await post_run(client, alice, thread["id"])).json()
    await RunDriver(queue).start()
    new = await post_run(client, alice, thread["id"], multitask_strategy=strategy)
    assert new.status_code == 201
    now = (await client.get(f"/runs/{pending['id']}", headers=alice)).json()
    assert (now["status"], now["cancel_reason"]) == ("cancelled", reason)
    asked = (await client.get(f"/runs/{leased['id']}", headers=alice)).json()
    assert (asked["status"], asked["cancel_reason"]) == ("leased", reason) and asked["cancel_requested_at"]


async def test_idempotent_thread_run_repeats_even_when_the_thread_is_busy(
    client: httpx.AsyncClient, alice: dict[str, str]
) -> None:
    thread = await new_thread(client, alice)
    key = {"Idempotency-Key": "msg-1"}
    body = {"agent": "demo", "input": {"prompt": "hi"}, "multitask_strategy": "reject"}
    first = await client.post(f"/threads/{thread['id']}/runs", json=body, headers=alice | key)
    again = await client.post(f"/threads/{thread['id']}/runs", json=body, headers=alice | key)
    assert (first.status_code, again.status_code) == (201, 200) and again.json()["id"] == first.json()["id"]
    changed = await client.post(f"/threads/{thread['id']}/runs", json=body | {"input": {}}, headers=alice | key)
    assert (changed.status_code, changed.json()["code"]) == (409, "idempotency_conflict")


async def test_delete_is_409_while_busy_then_204_with_runs_gone(
    client: httpx.AsyncClient, alice: dict[str, str], queue: Queue
) -> None:
    thread = await new_thread(client, alice)
    run = (await post_run(client, alice, thread["id"])).json()
    busy = await client.delete(f"/threads/{thread['id']}", headers=alice)
    assert (busy.status_code, busy.json()["code"]) == (409, "thread_busy")
    assert (await client.post(f"/runs/{run['id']}/cancel", headers=alice)).status_code == 202
    deleted = await client.delete(f"/threads/{thread['id']}", headers=alice)
    assert (deleted.status_code, deleted.content) == (204, b"")
    for path in (f"/threads/{thread['id']}", f"/runs/{run['id']}", f"/threads/{thread['id']}/messages"):
        response = await client.get(path, headers=alice)
        assert (response.status_code, response.json()["code"]) == (404, "not_found"), path


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code"),
    [
        ("POST", "/threads", {"metadata": [1]}, 422, "validation_error"),
        ("POST", "/threads", {"metadata": "x"}, 422, "validation_error"),
        ("POST", "/threads", {"metadata": {"nul": "a\x00"}}, 422, "validation_error"),
        ("POST", "/threads", {"extra": 1}, 422, "validation_error"),
        ("POST", "{thread}/runs", {"agent": "demo", "multitask_strategy": "shout"}, 422, "validation_error"),
        ("POST", "{thread}/runs", {"agent": "nope"}, 422, "unknown_agent"),
        ("POST", "{thread}/runs", {"agent": "demo", "input": {"prompt": "x" * 100_001}}, 422, "message_too_large"),
        ("POST", "{thread}/runs", {"agent": "demo", "input": {"messages": [{"role": "user", "content": "y" * 100_001}]}},
         422, "message_too_large"),
        ("GET", "/threads/not-a-uuid", None, 422, "invalid_id"),
        ("GET", "/threads/not-a-uuid/messages", None, 422, "invalid_id"),
        ("POST", "/threads/not-a-uuid/runs", {"agent": "demo"}, 422, "invalid_id"),
        ("DELETE", "/threads/not-a-uuid", None, 422, "invalid_id"),
        ("GET", "/threads/0b7c5a1e-0000-4000-8000-000000000000", None, 404, "not_found"),
        ("POST", "/threads/0b7c5a1e-0000-4000-8000-000000000000/runs", {"agent": "demo"}, 404, "not_found"),
        ("GET", "{thread}/messages?cursor=-1", None, 400, "invalid_cursor"),
        ("GET", "{thread}/runs?cursor=abc", None, 400, "invalid_cursor"),
        ("GET", "/threads?cursor=abc", None, 400, "invalid_cursor"),
    ],
)
async def test_bad_input_is_a_problem_and_creates_nothing(
    client: httpx.AsyncClient, alice: dict[str, str], method: str, path: str, body: Any, status: int, code: str
) -> None:
    thread = await new_thread(client, alice)
    url = path.replace("{thread}", f"/threads/{thread['id']}")
    response = await client.request(method, url, json=body, headers=alice)
    assert (response.status_code, response.json()["code"]) == (status, code), response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert (await client.get(f"/threads/{thread['id']}/runs", headers=alice)).json()["items"] == []
    assert len((await client.get("/threads", headers=alice)).json()["items"]) == 1


async def test_another_tenants_thread_is_404_on_every_route(
    client: httpx.AsyncClient, alice: dict[str, str], bob: dict[str, str]
) -> None:
    thread = await new_thread(client, alice, metadata={"secret": "alice-only"})
    base = f"/threads/{thread['id']}"
    for method, path, body in (
        ("GET", base, None),
        ("GET", f"{base}/messages", None),
        ("GET", f"{base}/runs", None),
        ("POST", f"{base}/runs", {"agent": "demo"}),
        ("DELETE", base, None),
    ):
        response = await client.request(method, path, json=body, headers=bob)
        assert (response.status_code, response.json()["code"]) == (404, "not_found"), f"{method} {path}"
        assert "alice-only" not in response.text
    assert (await client.get("/threads", headers=bob)).json()["items"] == []
    assert (await client.get(base, headers=alice)).json()["status"] == "idle"


async def test_a_two_message_conversation_with_the_demo_agent(
    client: httpx.AsyncClient, alice: dict[str, str], database_url: str
) -> None:
    thread = await new_thread(client, alice)
    async with in_process_worker(database_url):
        runs = []
        for prompt in ("hello", "and again"):
            run = (await post_run(client, alice, thread["id"], input={"prompt": prompt, "steps": 1, "step_s": 0})).json()
            runs.append(run)

        async def finished() -> list[dict[str, Any]] | None:
            shown = [(await client.get(f"/runs/{r['id']}", headers=alice)).json() for r in runs]
            return shown if all(r["status"] == "done" for r in shown) else None

        done = await wait_for(finished, within=20)
    assert [r["output"]["thread_messages"] for r in done] == [0, 2]
    page = (await client.get(f"/threads/{thread['id']}/messages", params={"limit": 3}, headers=alice)).json()
    rest = (await client.get(f"/threads/{thread['id']}/messages", params={"cursor": page["next_cursor"]}, headers=alice)).json()
    messages = page["items"] + rest["items"]
    assert set(messages[0]) == MESSAGE_FIELDS and rest["next_cursor"] is None
    assert [(m["index"], m["role"], m["content"], m["run_id"]) for m in messages] == [
        (0, "user", "hello", runs[0]["id"]),
        (1, "assistant", "hello", runs[0]["id"]),
        (2, "user", "and again", runs[1]["id"]),
        (3, "assistant", "and again", runs[1]["id"]),
    ]
    shown = (await client.get(f"/threads/{thread['id']}", headers=alice)).json()
    assert (shown["status"], shown["message_count"], shown["last_run_id"]) == ("idle", 4, runs[1]["id"])


@pytest.mark.parametrize(("strategy", "kept"), [("interrupt", ["a long answer", "no, this", "no, this"]), ("rollback", ["no, this", "no, this"])])
async def test_interrupt_and_rollback_stop_a_running_run_through_its_worker(
    client: httpx.AsyncClient, alice: dict[str, str], database_url: str, strategy: str, kept: list[str]
) -> None:
    thread = await new_thread(client, alice)
    async with in_process_worker(database_url):
        long = (await post_run(client, alice, thread["id"], input={"prompt": "a long answer", "steps": 100, "step_s": 0.2})).json()

        async def stored_its_user_message() -> bool:
            page = (await client.get(f"/threads/{thread['id']}/messages", headers=alice)).json()
            return len(page["items"]) == 1

        await wait_for(stored_its_user_message, within=20)
        new = (await post_run(client, alice, thread["id"], input={"prompt": "no, this", "steps": 1, "step_s": 0}, multitask_strategy=strategy)).json()

        async def new_run_done() -> dict[str, Any] | None:
            run = (await client.get(f"/runs/{new['id']}", headers=alice)).json()
            return run if run["status"] == "done" else None

        await wait_for(new_run_done, within=30)
    stopped = (await client.get(f"/runs/{long['id']}", headers=alice)).json()
    reason = {"interrupt": "interrupted", "rollback": "rolled_back"}[strategy]
    assert (stopped["status"], stopped["cancel_reason"]) == ("cancelled", reason)
    messages = (await client.get(f"/threads/{thread['id']}/messages", headers=alice)).json()["items"]
    assert [m["content"] for m in messages] == kept
    assert [m["index"] for m in messages] == list(range(len(kept)))
