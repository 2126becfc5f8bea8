"""A thread token ends another run only with its ``cancel`` scope (docs/threads.md, "Browser
tokens"): the ``interrupt`` and ``rollback`` strategies of ``POST /threads/{id}/runs`` and of
``/ai-sdk/chat``, and ``regenerate-message``, answer 403 ``insufficient_scope`` without it, and
nothing is ended, erased or created; with it they do what a tenant key does."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.api_support import new_key
from tests.integration.api.test_api_ai_sdk import DEMO, chat_body, chunks
from tests.integration.api.test_api_thread_tokens import mint, new_thread
from tests.worker_support import in_process_worker

ENDING = {"interrupt": "interrupted", "rollback": "rolled_back"}
NO_CANCEL = ["read", "run", "resume"]


# A tenant of this module's own: the in-process worker counts its runs in this process's
# metrics, which test_api_runs.py checks for "alice".
@pytest.fixture
async def alice(engine: AsyncEngine) -> dict[str, str]:
    return await new_key(engine, "scopes-a")


@pytest.fixture
async def worker(database_url: str) -> AsyncIterator[None]:
    async with in_process_worker(database_url):
        yield


def refused(response: httpx.Response) -> bool:
    """A 403 problem naming the missing scope."""
    body = response.json()
    return (
        response.status_code == 403
        and response.headers["content-type"] == "application/problem+json"
        and body["code"] == "insufficient_scope"
        and "'cancel'" in body["detail"]
    )


async def runs_of(client: httpx.AsyncClient, thread_id: str, key: dict[str, str]) -> list[tuple[str, str]]:
    """The thread's runs, newest first, with their status."""
    items = (await client.get(f"/threads/{thread_id}/runs", headers=key)).json()["items"]
    return [(r["id"], r["status"]) for r in items]


async def test_a_new_run_that_ends_the_runs_in_flight_needs_cancel(client: httpx.AsyncClient, alice: dict[str, str]) -> None:
    thread_id = (await new_thread(client, alice))["id"]
    runs = f"/threads/{thread_id}/runs"
    in_flight = (await client.post(runs, json={"agent": "demo"}, headers=alice)).json()["id"]  # pending: no worker
    without = await mint(client, alice, thread_id, scopes=NO_CANCEL)
    for strategy in ENDING:
        response = await client.post(runs, json={"agent": "demo", "multitask_strategy": strategy}, headers=without)
        assert refused(response), response.text
    assert await runs_of(client, thread_id, alice) == [(in_flight, "pending")]  # nothing ended or created
    # a strategy that ends nothing needs no more than `run`
    queued = await client.post(runs, json={"agent": "demo", "multitask_strategy": "enqueue"}, headers=without)
    assert queued.status_code == 201

    allowed = await mint(client, alice, thread_id, scopes=["run", "cancel"])
    for strategy, reason in ENDING.items():
        created = await client.post(runs, json={"agent": "demo", "multitask_strategy": strategy}, headers=allowed)
        assert created.status_code == 201, created.text
        (latest, _), *ended = await runs_of(client, thread_id, alice)
        assert latest == created.json()["id"]
        stopped = (await client.get(f"/runs/{ended[0][0]}", headers=alice)).json()
        assert (stopped["status"], stopped["cancel_reason"]) == ("cancelled", reason)


async def test_regenerating_or_interrupting_a_chat_needs_cancel(
    worker: None, client: httpx.AsyncClient, alice: dict[str, str]
) -> None:
    chat = (await new_thread(client, alice))["id"]
    first = await client.post("/ai-sdk/chat", json=chat_body(chat, "one", **DEMO), headers=alice)
    assert first.status_code == 200, first.text
    history = (await client.get(f"/threads/{chat}/messages", headers=alice)).json()["items"]
    assert [m["role"] for m in history] == ["user", "assistant"]

    without = await mint(client, alice, chat, scopes=NO_CANCEL)
    asks = [
        chat_body(chat, "one", trigger="regenerate-message", **DEMO),
        *(chat_body(chat, "two", multitask_strategy=strategy, **DEMO) for strategy in ENDING),
    ]
    for body in asks:
        response = await client.post("/ai-sdk/chat", json=body, headers=without)
        assert refused(response), (body, response.text)
    assert (await client.get(f"/threads/{chat}/messages", headers=alice)).json()["items"] == history  # nothing erased
    assert len(await runs_of(client, chat, alice)) == 1  # nothing created

    allowed = await mint(client, alice, chat, scopes=["run", "cancel"])
    again = await client.post("/ai-sdk/chat", json=asks[0], headers=allowed)
    assert again.status_code == 200, again.text
    assert chunks(again.text)[0]["messageId"] != chunks(first.text)[0]["messageId"]
