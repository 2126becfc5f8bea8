"""The Python client against a real runq: API process, worker, PostgreSQL."""

from __future__ import annotations

import asyncio
import subprocess
import time
from typing import Any

import httpx
import pytest
from runq_client import (
    AsyncClient,
    Client,
    Event,
    Message,
    RunqError,
    RunqTimeout,
    Thread,
    ThreadToken,
)

from tests.api_support import ApiProcess
from tests.clients.conftest import new_key
from tests.clients.faultproxy import FaultProxy

DEMO = {"prompt": "one two three", "steps": 2, "step_s": 0.05}


def stored_events(api: ApiProcess, key: str, run_id: str) -> list[tuple[int, str, dict[str, Any]]]:
    """The run's log as the JSON page has it (plain httpx: the reference the client is held to)."""
    response = httpx.get(
        f"{api.base_url}/runs/{run_id}/events",
        params={"limit": 1000},
        headers={"Authorization": f"Bearer {key}", "Accept": "application/json"},
    )
    return [(e["seq"], e["type"], e["data"]) for e in response.json()["items"]]


def as_tuples(events: list[Event]) -> list[tuple[int, str, dict[str, Any]]]:
    return [(e.seq, e.type, e.data) for e in events]


def test_create_get_list_stream_and_wait(api: ApiProcess, worker: subprocess.Popen[bytes], api_key: str) -> None:
    with Client(api.base_url, api_key) as client:
        run = client.runs.create("demo", DEMO, priority=3)
        assert (run.status, run.agent, run.priority, run.input) == ("pending", "demo", 3, DEMO)
        events = list(client.runs.stream(run.id))
        done = client.runs.wait(run.id, timeout=30)
        assert done.status == "done" and done.output == {"text": "one two three", "steps": 2}
        assert as_tuples(events) == stored_events(api, api_key, run.id)
        assert events[0].type == "run.queued" and events[-1].is_terminal
        assert [e.seq for e in events] == list(range(1, done.last_event_seq + 1))
        # A stream opened after the end, or after some seq, replays the rest and stops.
        assert [e.seq for e in client.runs.stream(run.id, after=4)] == list(range(5, done.last_event_seq + 1))
        assert list(client.runs.stream(run.id, after=done.last_event_seq)) == []
        page = client.runs.events(run.id, after=1, limit=2)
        assert [e.seq for e in page.items] == [2, 3] and page.items[0].attempt == 1
        assert client.runs.get(run.id) == done
        listed = client.runs.list(status="done", limit=200)
        assert run.id in {r.id for r in listed.items}


def test_cancel_and_errors(api: ApiProcess, database_url: str, api_key: str) -> None:
    with Client(api.base_url, api_key) as client:
        run = client.runs.create("demo", DEMO, delay_s=3600)
        cancelled = client.runs.cancel(run.id, note="not needed")
        assert (cancelled.status, cancelled.cancel_reason) == ("cancelled", "user")
        assert client.runs.wait(run.id, timeout=5).status == "cancelled"
        assert [e.type for e in client.runs.stream(run.id)] == ["run.queued", "run.cancel_requested", "run.cancelled"]
        with pytest.raises(RunqError) as finished:
            client.runs.cancel(run.id)
        assert (finished.value.status, finished.value.code) == (409, "run_finished")
        with pytest.raises(RunqError) as unknown:
            client.runs.create("no-such-agent", {})
        assert (unknown.value.status, unknown.value.code) == (422, "unknown_agent")
        assert unknown.value.problem["agents"]
        with pytest.raises(RunqError) as invalid:
            client.runs.get("not-a-uuid")
        assert (invalid.value.status, invalid.value.code) == (422, "invalid_id")
    with Client(api.base_url, new_key(database_url)) as other:  # another tenant's run is 404
        for call in (lambda: other.runs.get(run.id), lambda: list(other.runs.stream(run.id))):
            with pytest.raises(RunqError) as missing:
                call()
            assert (missing.value.status, missing.value.code) == (404, "not_found")
    with Client(api.base_url, "rq_wrong") as anonymous, pytest.raises(RunqError) as unauthorized:
        anonymous.runs.list()
    assert (unauthorized.value.status, unauthorized.value.code) == (401, "unauthorized")


def test_wait_times_out_on_a_run_that_does_not_end(api: ApiProcess, api_key: str) -> None:
    with Client(api.base_url, api_key) as client:
        run = client.runs.create("demo", DEMO, delay_s=3600)
        with pytest.raises(RunqTimeout):
            client.runs.wait(run.id, timeout=0.5)
        client.runs.cancel(run.id)


@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_create_through_a_proxy_that_drops_the_first_answer_makes_one_run(
    api: ApiProcess, database_url: str, flavour: str
) -> None:
    """The first connection reaches the server, which creates the run; its answer is dropped.
    The retry carries the same Idempotency-Key and gets that run back (200), not a second one."""
    key = new_key(database_url)
    budgets = iter([0])
    with FaultProxy(api.port, lambda: next(budgets, None)) as proxy:
        if flavour == "sync":
            with Client(proxy.base_url, key) as client:
                run = client.runs.create("demo", DEMO, delay_s=3600)
        else:
            async with AsyncClient(proxy.base_url, key) as aclient:
                run = await aclient.runs.create("demo", DEMO, delay_s=3600)
        assert (proxy.cuts, proxy.connections) == (1, 2)
    with Client(api.base_url, key) as direct:
        assert [r.id for r in direct.runs.list().items] == [run.id]
        direct.runs.cancel(run.id)


async def test_async_client_streams_and_waits(api: ApiProcess, worker: subprocess.Popen[bytes], api_key: str) -> None:
    async with AsyncClient(api.base_url, api_key) as client:
        run = await client.runs.create("demo", DEMO)
        events = [event async for event in client.runs.stream(run.id)]
        done = await client.runs.wait(run.id, timeout=30)
        assert as_tuples(events) == stored_events(api, api_key, run.id)
        assert done.status == "done" and events[-1].type == "run.completed"
        with pytest.raises(RunqError) as missing:
            await client.runs.get("00000000-0000-0000-0000-000000000000")
        assert missing.value.code == "not_found"


def test_resume_a_waiting_run(api: ApiProcess, worker: subprocess.Popen[bytes], api_key: str) -> None:
    with Client(api.base_url, api_key) as client:
        run = client.runs.create("demo", {"prompt": "deploy?", "steps": 0, "wait": "approval"})
        deadline = time.monotonic() + 30
        while (waiting := client.runs.get(run.id)).status != "waiting":
            assert time.monotonic() < deadline, "the run never waited"
            time.sleep(0.05)
        assert waiting.waitpoint is not None
        assert (waiting.waitpoint.name, waiting.waitpoint.payload) == ("approval", {"prompt": "deploy?"})
        with pytest.raises(RunqError) as stale:
            client.runs.resume(run.id, {"approved": True}, waitpoint_id="00000000-0000-0000-0000-000000000000")
        assert (stale.value.status, stale.value.code) == (409, "not_waiting")
        read_only = client.runs.stream_token(run.id)
        assert read_only.scopes == ["read"]
        refused = httpx.post(f"{api.base_url}/runs/{run.id}/resume", params={"token": read_only.token}, json={"value": 1})
        assert (refused.status_code, refused.json()["code"]) == (403, "insufficient_scope")
        resumed = client.runs.resume(run.id, {"approved": True}, waitpoint_id=waiting.waitpoint.waitpoint_id)
        assert resumed.status in ("pending", "leased", "done") and resumed.waitpoint is None
        done = client.runs.wait(run.id, timeout=30)
        assert done.output == {"text": "deploy?", "steps": 0, "resumed_with": {"approved": True}}
        types = [e.type for e in client.runs.stream(run.id)]
        assert types.count("run.waiting") == 1 and types.count("run.resumed") == 1


async def test_async_resume_with_a_resume_scoped_token(api: ApiProcess, worker: subprocess.Popen[bytes], api_key: str) -> None:
    async with AsyncClient(api.base_url, api_key) as client:
        run = await client.runs.create("demo", {"steps": 0, "wait": "input"})
        deadline = time.monotonic() + 30
        while (await client.runs.get(run.id)).status != "waiting":
            assert time.monotonic() < deadline, "the run never waited"
            await asyncio.sleep(0.05)
        token = await client.runs.stream_token(run.id, scopes=["read", "resume"])
        assert token.scopes == ["read", "resume"]
        async with httpx.AsyncClient() as browser:  # what the web UI does with such a token
            answer = await browser.post(f"{api.base_url}/runs/{run.id}/resume", params={"token": token.token}, json={"value": 7})
        assert answer.status_code == 202
        assert (await client.runs.wait(run.id, timeout=30)).output["resumed_with"] == 7


def test_threads_against_a_real_runq(api: ApiProcess, worker: subprocess.Popen[bytes], api_key: str) -> None:
    with Client(api.base_url, api_key) as client:
        thread = client.threads.create(metadata={"user": "ana"})
        assert isinstance(thread, Thread) and (thread.metadata, thread.status, thread.message_count) == ({"user": "ana"}, "idle", 0)
        assert client.threads.create(metadata={"user": "ana"}).id != thread.id  # each call its own key
        first = client.threads.runs.create(thread.id, "demo", {"prompt": "hello", "steps": 0})
        second = client.threads.runs.create(thread.id, "demo", {"prompt": "again", "steps": 0}, multitask_strategy="enqueue")
        assert first.thread_id == second.thread_id == thread.id
        assert client.runs.wait(second.id, timeout=30).output == {"text": "again", "steps": 0, "thread_messages": 2}
        assert client.runs.get(first.id).status == "done"
        shown = client.threads.get(thread.id)
        assert (shown.status, shown.message_count, shown.last_run_id) == ("idle", 4, second.id)
        assert thread.id in {t.id for t in client.threads.list(limit=200).items}
        page = client.threads.messages(thread.id, limit=3)
        rest = client.threads.messages(thread.id, cursor=page.next_cursor)
        messages = [*page.items, *rest.items]
        assert all(isinstance(m, Message) for m in messages) and rest.next_cursor is None
        assert [(m.index, m.role, m.content) for m in messages] == [
            (0, "user", "hello"), (1, "assistant", "hello"), (2, "user", "again"), (3, "assistant", "again"),
        ]  # fmt: skip
        runs = client.threads.runs.list(thread.id, limit=1)
        assert [r.id for r in runs.items] == [second.id]
        assert [r.id for r in client.threads.runs.list(thread.id, cursor=runs.next_cursor).items] == [first.id]
        assert [r.id for r in client.threads.runs.list(thread.id, status="done").items] == [second.id, first.id]

        busy = client.threads.runs.create(thread.id, "demo", {"steps": 1, "step_s": 30})
        with pytest.raises(RunqError) as rejected:
            client.threads.runs.create(thread.id, "demo", {}, multitask_strategy="reject")
        assert (rejected.value.status, rejected.value.code) == (409, "thread_busy")
        with pytest.raises(RunqError) as in_flight:
            client.threads.delete(thread.id)
        assert (in_flight.value.status, in_flight.value.code) == (409, "thread_busy")
        client.runs.cancel(busy.id)
        assert client.runs.wait(busy.id, timeout=30).status == "cancelled"
        assert client.threads.delete(thread.id) is None
        with pytest.raises(RunqError) as gone:
            client.threads.get(thread.id)
        assert (gone.value.status, gone.value.code) == (404, "not_found")
        with pytest.raises(ValueError, match="multitask_strategy"):
            client.threads.runs.create(thread.id, "demo", multitask_strategy="later")


async def test_async_client_threads(api: ApiProcess, worker: subprocess.Popen[bytes], api_key: str) -> None:
    async with AsyncClient(api.base_url, api_key) as client:
        thread = await client.threads.create()
        run = await client.threads.runs.create(thread.id, "demo", {"prompt": "hi", "steps": 0}, multitask_strategy="reject")
        assert (await client.runs.wait(run.id, timeout=30)).status == "done"
        assert [m.content for m in (await client.threads.messages(thread.id)).items] == ["hi", "hi"]
        assert [r.id for r in (await client.threads.runs.list(thread.id)).items] == [run.id]
        await client.threads.delete(thread.id)


def test_a_thread_token_from_the_client_works_as_the_browser_key(
    api: ApiProcess, worker: subprocess.Popen[bytes], api_key: str
) -> None:
    with Client(api.base_url, api_key) as client:
        thread = client.threads.create(chat_id="client-chat", metadata={"user": "ana"})
        assert thread.chat_id == "client-chat"
        with pytest.raises(RunqError) as taken:
            client.threads.create(chat_id="client-chat")
        assert (taken.value.status, taken.value.code) == (409, "chat_id_conflict")
        minted = client.threads.token(thread.id, scopes=["read", "run"], ttl_s=60, agent="demo", input={"steps": 0})
        assert isinstance(minted, ThreadToken)
        assert (minted.thread_id, minted.scopes, minted.agent, minted.input) == (thread.id, ["read", "run"], "demo", {"steps": 0})
    with Client(api.base_url, minted.token) as browser:  # the token goes where a key would
        run = browser.threads.runs.create(thread.id, "demo", {"prompt": "hi", "steps": 5})
        assert run.input == {"prompt": "hi", "steps": 0}  # the bound input wins
        assert [e.type for e in browser.runs.stream(run.id)][-1] == "run.completed"
        assert browser.threads.get(thread.id).last_run_id == run.id
        with pytest.raises(RunqError) as scoped:
            browser.runs.cancel(run.id)
        assert (scoped.value.status, scoped.value.code) == (403, "insufficient_scope")
        with pytest.raises(RunqError) as elsewhere:
            browser.runs.get(run.id)
        assert elsewhere.value.status == 401
