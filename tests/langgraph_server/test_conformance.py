"""LangGraph's server API, once, over the official Python SDK (``langgraph_sdk``): each case
passes against runq's ``/langgraph`` and against LangGraph's own ``langgraph dev`` (DESIGN §17),
ids and times aside. Cases marked ``runq_only`` are where runq is stronger and say how."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import ConflictError, NotFoundError

from tests.langgraph_server.conftest import Server, runq_only
from tests.langgraph_server.support import NAMESPACE, collect, gated_run


async def test_each_graph_has_its_default_assistant(lg: LangGraphClient) -> None:
    found = await lg.assistants.search(limit=100)
    by_graph = {a["graph_id"]: a for a in found}
    assert {"chat", "counter", "ask", "gated", "nested", "boom"} <= set(by_graph)
    counter = by_graph["counter"]
    assert counter["assistant_id"] == str(uuid.uuid5(NAMESPACE, "counter"))
    assert (counter["name"], counter["version"], counter["metadata"]) == (
        "counter",
        1,
        {"created_by": "system"},
    )
    assert (await lg.assistants.get(counter["assistant_id"]))["graph_id"] == "counter"
    assert await lg.assistants.count(graph_id="counter") == 1
    graph = await lg.assistants.get_graph(counter["assistant_id"])
    assert {n["id"] for n in graph["nodes"]} >= {"__start__", "one", "two", "__end__"}
    schemas = await lg.assistants.get_schemas(counter["assistant_id"])
    assert set(schemas["input_schema"]["properties"]) == {"count", "steps"}


async def test_an_unknown_assistant_is_404(lg: LangGraphClient) -> None:
    with pytest.raises(NotFoundError):
        await lg.assistants.get(str(uuid.uuid4()))


async def test_threads_are_created_read_searched_patched_and_deleted(lg: LangGraphClient) -> None:
    tag = uuid.uuid4().hex
    thread = await lg.threads.create(metadata={"tag": tag})
    assert (thread["status"], thread["metadata"], thread["values"]) == ("idle", {"tag": tag}, None)
    got = await lg.threads.get(thread["thread_id"])
    assert got["thread_id"] == thread["thread_id"]
    found = await lg.threads.search(metadata={"tag": tag})
    assert [t["thread_id"] for t in found] == [thread["thread_id"]]
    assert await lg.threads.count(metadata={"tag": tag}) == 1
    patched = await lg.threads.update(thread["thread_id"], metadata={"more": 1})
    assert patched["metadata"] == {"tag": tag, "more": 1}
    await lg.threads.delete(thread["thread_id"])
    with pytest.raises(NotFoundError):
        await lg.threads.get(thread["thread_id"])


async def test_thread_search_sorts_selects_and_filters_by_id(
    server: Server, lg: LangGraphClient
) -> None:
    tag = uuid.uuid4().hex
    made = [(await lg.threads.create(metadata={"tag": tag, "n": n}))["thread_id"] for n in range(3)]
    asked = await lg.runs.wait(made[1], "ask", input={"question": "name?"})  # interrupted
    assert "__interrupt__" in asked
    await lg.threads.update(made[0], metadata={"touched": True})  # the latest updated

    async def ids(**search: Any) -> list[str]:
        return [t["thread_id"] for t in await lg.threads.search(metadata={"tag": tag}, **search)]

    assert await ids() == [made[0], made[1], made[2]]  # no sort_by: updated_at, newest first
    assert await ids(sort_by="created_at") == made[::-1]
    assert await ids(sort_by="created_at", sort_order="asc") == made
    assert await ids(sort_by="updated_at", sort_order="asc") == [made[2], made[1], made[0]]
    assert await ids(sort_by="thread_id", sort_order="asc") == sorted(made)
    assert await ids(sort_by="thread_id", sort_order="desc") == sorted(made, reverse=True)
    assert (await ids(sort_by="status", sort_order="asc"))[-1] == made[1]  # idle < interrupted
    assert (await ids(sort_by="status", sort_order="desc"))[0] == made[1]
    assert await ids(sort_by="created_at", sort_order="asc", limit=1, offset=1) == [made[1]]
    assert await ids(sort_by="status", sort_order="desc", limit=1) == [made[1]]
    assert await ids(ids=[made[2], made[0]], sort_by="created_at", sort_order="asc") == [
        made[0],
        made[2],
    ]
    selected = await lg.threads.search(
        metadata={"tag": tag}, select=["thread_id", "status"], sort_by="created_at"
    )
    assert selected == [
        {"thread_id": made[2], "status": "idle"},
        {"thread_id": made[1], "status": "interrupted"},
        {"thread_id": made[0], "status": "idle"},
    ]
    async with server.http() as http:
        for bad in ({"sort_by": "name"}, {"sort_order": "up"}, {"select": ["nope"]}):
            answer = await http.post("/threads/search", json=bad)
            assert answer.status_code == 422, (bad, answer.text)
            if server.is_runq:
                assert answer.json()["code"] == "validation_error"


async def test_a_thread_id_the_client_chose(lg: LangGraphClient) -> None:
    thread_id = str(uuid.uuid4())
    created = await lg.threads.create(thread_id=thread_id, metadata={"a": 1})
    assert created["thread_id"] == thread_id
    with pytest.raises(ConflictError):
        await lg.threads.create(thread_id=thread_id)
    again = await lg.threads.create(thread_id=thread_id, if_exists="do_nothing")
    assert (again["thread_id"], again["metadata"]) == (thread_id, {"a": 1})


async def test_a_waited_run_answers_the_final_values(lg: LangGraphClient) -> None:
    thread = await lg.threads.create()
    out = await lg.runs.wait(thread["thread_id"], "counter", input={"count": 1})
    assert out == {"count": 20, "steps": ["one", "two"]}
    got = await lg.threads.get(thread["thread_id"])
    assert (got["status"], got["values"]) == ("idle", out)
    assert got["metadata"]["graph_id"] == "counter"
    state = await lg.threads.get_state(thread["thread_id"])
    assert (state["values"], state["next"], state["tasks"]) == (out, [], [])
    assert state["checkpoint"]["thread_id"] == thread["thread_id"]
    assert state["parent_checkpoint"] is not None
    history = await lg.threads.get_history(thread["thread_id"], limit=10)
    assert history[0]["values"] == out and len(history) == 4  # input, one, two, and the empty start


async def test_an_interrupt_pauses_the_thread_and_a_command_resumes_it(lg: LangGraphClient) -> None:
    thread = await lg.threads.create()
    paused = await lg.runs.wait(thread["thread_id"], "ask", input={"question": "name?"})
    assert paused["question"] == "name?"
    assert [i["value"] for i in paused["__interrupt__"]] == [{"question": "name?"}]
    got = await lg.threads.get(thread["thread_id"])
    assert got["status"] == "interrupted"
    [(task_id, interrupts)] = got["interrupts"].items()
    assert [i["value"] for i in interrupts] == [{"question": "name?"}] and set(interrupts[0]) == {
        "id",
        "value",
    }
    state = await lg.threads.get_state(thread["thread_id"])
    assert state["next"] == ["ask"] and state["tasks"][0]["id"] == task_id
    assert state["tasks"][0]["interrupts"] == interrupts
    [run] = await lg.runs.list(thread["thread_id"])
    assert run["status"] == "success"
    done = await lg.runs.wait(thread["thread_id"], "ask", command={"resume": "Ada"})
    assert done == {"question": "name?", "answer": "Ada"}
    assert (await lg.threads.get(thread["thread_id"]))["status"] == "idle"


async def test_interrupt_before_pauses_there(lg: LangGraphClient) -> None:
    thread = await lg.threads.create()
    out = await lg.runs.wait(
        thread["thread_id"], "counter", input={"count": 1}, interrupt_before=["two"]
    )
    assert out == {"count": 2, "steps": ["one"]}
    assert (await lg.threads.get(thread["thread_id"]))["status"] == "interrupted"
    assert (await lg.threads.get_state(thread["thread_id"]))["next"] == ["two"]
    assert await lg.runs.wait(thread["thread_id"], "counter", input=None) == {
        "count": 20,
        "steps": ["one", "two"],
    }


async def test_a_background_run_is_listed_read_and_joined(lg: LangGraphClient) -> None:
    thread = await lg.threads.create()
    run = await lg.runs.create(
        thread["thread_id"], "counter", input={"count": 3}, metadata={"m": 1}
    )
    assert run["status"] in ("pending", "running") and run["thread_id"] == thread["thread_id"]
    assert await lg.runs.join(thread["thread_id"], run["run_id"]) == {
        "count": 40,
        "steps": ["one", "two"],
    }
    got = await lg.runs.get(thread["thread_id"], run["run_id"])
    assert (got["status"], got["metadata"]["m"]) == ("success", 1)
    assert got["assistant_id"] == str(uuid.uuid5(NAMESPACE, "counter"))
    metadata = (await lg.threads.get(thread["thread_id"]))["metadata"]
    assert (metadata["graph_id"], metadata["assistant_id"]) == ("counter", got["assistant_id"])
    listed = await lg.runs.list(thread["thread_id"])
    assert [r["run_id"] for r in listed] == [run["run_id"]]


async def test_reject_answers_409_while_the_thread_is_busy(
    lg: LangGraphClient, tmp_path: Path
) -> None:
    thread = await lg.threads.create()
    gate = tmp_path / "gate"
    run = await gated_run(lg, thread["thread_id"], gate)
    assert (await lg.threads.get(thread["thread_id"]))["status"] == "busy"
    with pytest.raises(ConflictError):
        await lg.runs.create(
            thread["thread_id"], "gated", input={"gate": str(gate)}, multitask_strategy="reject"
        )
    gate.touch()
    assert (await lg.runs.join(thread["thread_id"], run["run_id"]))["passed"] is True


async def test_a_cancelled_run_is_interrupted_and_a_finished_one_cannot_be(
    lg: LangGraphClient, tmp_path: Path
) -> None:
    thread = await lg.threads.create()
    run = await gated_run(lg, thread["thread_id"], tmp_path / "never")
    await lg.runs.cancel(thread["thread_id"], run["run_id"], wait=True)
    assert (await lg.runs.get(thread["thread_id"], run["run_id"]))["status"] == "interrupted"
    done = await lg.runs.create(thread["thread_id"], "counter", input={"count": 1})
    await lg.runs.join(thread["thread_id"], done["run_id"])
    with pytest.raises(NotFoundError):
        await lg.runs.cancel(thread["thread_id"], done["run_id"])


async def test_a_stateless_run(lg: LangGraphClient) -> None:
    assert await lg.runs.wait(None, "counter", input={"count": 0}) == {
        "count": 10,
        "steps": ["one", "two"],
    }


async def test_keys_and_tenants(server: Server, lg: LangGraphClient, database_url: str) -> None:
    runq_only(server, "langgraph dev has no auth; runq takes x-api-key or a bearer key, per tenant")
    from tests.clients.conftest import new_key

    thread = await lg.threads.create()
    async with httpx.AsyncClient(base_url=server.url) as http:
        assert (await http.get(f"/threads/{thread['thread_id']}")).status_code == 401
        bearer = {"Authorization": f"Bearer {server.key}"}
        assert (
            await http.get(f"/threads/{thread['thread_id']}", headers=bearer)
        ).status_code == 200
        other = {"x-api-key": new_key(database_url)}
        assert (await http.get(f"/threads/{thread['thread_id']}", headers=other)).status_code == 404


async def test_a_thread_token_opens_its_thread_only(
    server: Server, lg: LangGraphClient, tmp_path: Path
) -> None:
    runq_only(server, "a browser gets a token for one thread (§15.3), not the tenant's key")
    mine, other = await lg.threads.create(), await lg.threads.create()
    root = server.url.removesuffix("/langgraph")
    async with httpx.AsyncClient(base_url=root, headers={"x-api-key": server.key or ""}) as http:
        token = (
            await http.post(
                f"/threads/{mine['thread_id']}/token",
                headers={"Authorization": f"Bearer {server.key}"},
            )
        ).json()["token"]
    browser = server.client(key=token)
    assert await browser.runs.wait(mine["thread_id"], "counter", input={"count": 1}) == {
        "count": 20,
        "steps": ["one", "two"],
    }
    assert (await browser.threads.get_state(mine["thread_id"]))["values"]["count"] == 20
    run = await gated_run(browser, mine["thread_id"], tmp_path / "never")
    await browser.runs.cancel(mine["thread_id"], run["run_id"], wait=True)
    assert (await browser.runs.get(mine["thread_id"], run["run_id"]))["status"] == "interrupted"
    for refused in (
        browser.threads.get(other["thread_id"]),
        browser.threads.search(),
        browser.assistants.search(),
    ):
        with pytest.raises(httpx.HTTPStatusError) as caught:
            await refused
        assert caught.value.response.status_code == 401


async def test_a_run_survives_its_worker_killed_mid_stream(
    server: Server, lg: LangGraphClient, tmp_path: Path
) -> None:
    runq_only(
        server, "a run is a row: another worker resumes it from its last checkpoint after a SIGKILL"
    )
    assert server.worker is not None
    thread = await lg.threads.create()
    gate = tmp_path / "gate"
    run = await gated_run(lg, thread["thread_id"], gate)
    seen = []
    async for part in lg.runs.join_stream(thread["thread_id"], run["run_id"], last_event_id="-1"):
        seen.append(part)
        if part.event == "values":  # the input's values: the node is running now
            break
    server.worker.kill_and_restart()
    gate.touch()
    rest = await collect(
        lg.runs.join_stream(thread["thread_id"], run["run_id"], last_event_id=seen[-1].id)
    )
    whole = await collect(
        lg.runs.join_stream(thread["thread_id"], run["run_id"], last_event_id="-1")
    )
    assert [(p.id, p.event, p.data) for p in seen + rest] == [
        (p.id, p.event, p.data) for p in whole
    ]
    ids = [int(p.id) for p in whole]
    assert ids == sorted(set(ids))  # no repeat, in order
    assert whole[-1].data == {"gate": str(gate), "passed": True}
    assert (await lg.threads.get_state(thread["thread_id"]))["values"] == {
        "gate": str(gate),
        "passed": True,
    }
    assert (await lg.runs.get(thread["thread_id"], run["run_id"]))["status"] == "success"


async def test_deleting_a_busy_thread_cancels_its_run(lg: LangGraphClient, tmp_path: Path) -> None:
    thread = await lg.threads.create()
    await gated_run(lg, thread["thread_id"], tmp_path / "never")
    await lg.threads.delete(thread["thread_id"])
    with pytest.raises(NotFoundError):
        await lg.threads.get(thread["thread_id"])


async def test_a_rolled_back_run_is_gone_with_its_writes(
    lg: LangGraphClient, tmp_path: Path
) -> None:
    thread = await lg.threads.create()
    opened = tmp_path / "open"
    opened.touch()
    await lg.runs.wait(thread["thread_id"], "gated", input={"gate": str(opened), "passed": False})
    before = await lg.threads.get_state(thread["thread_id"])
    run = await gated_run(lg, thread["thread_id"], tmp_path / "never")
    await lg.runs.cancel(thread["thread_id"], run["run_id"], wait=True, action="rollback")
    with pytest.raises(NotFoundError):
        await lg.runs.get(thread["thread_id"], run["run_id"])
    assert run["run_id"] not in [r["run_id"] for r in await lg.runs.list(thread["thread_id"])]
    after = await lg.threads.get_state(thread["thread_id"])
    assert after["values"] == before["values"] == {"gate": str(opened), "passed": True}


async def test_cancel_many_by_run_ids(lg: LangGraphClient, tmp_path: Path) -> None:
    thread = await lg.threads.create()
    run = await gated_run(lg, thread["thread_id"], tmp_path / "never")
    await lg.runs.cancel_many(thread_id=thread["thread_id"], run_ids=[run["run_id"]])
    got = await lg.runs.join(thread["thread_id"], run["run_id"])
    assert got is not None
    assert (await lg.runs.get(thread["thread_id"], run["run_id"]))["status"] == "interrupted"


async def test_where_a_run_can_be_found_again(server: Server) -> None:
    async with server.http() as http:
        thread_id = (await http.post("/threads", json={})).json()["thread_id"]
        body = {"assistant_id": "counter", "input": {"count": 1}}
        created = await http.post(f"/threads/{thread_id}/runs", json=body)
        run = f"/threads/{thread_id}/runs/{created.json()['run_id']}"
        assert (created.status_code, created.headers["content-location"]) == (200, run)
        waited = await http.post(f"/threads/{thread_id}/runs/wait", json=body)
        assert waited.headers["location"] == waited.headers["content-location"] + "/join"
        assert waited.headers["content-location"].startswith(f"/threads/{thread_id}/runs/")
        async with http.stream("POST", "/runs/stream", json=body) as streamed:
            assert streamed.headers["location"] == streamed.headers["content-location"] + "/stream"
            await streamed.aread()
        refused = await http.post(f"/threads/{thread_id}/runs", json={"assistant_id": "nope"})
        assert refused.status_code == 422


async def test_a_graph_that_raises_fails_its_run_and_thread(lg: LangGraphClient) -> None:
    thread = await lg.threads.create()
    parts = await collect(
        lg.runs.stream(thread["thread_id"], "boom", input={"path": []}, stream_mode="updates")
    )
    assert (parts[-1].event, parts[-1].data) == (
        "error",
        {"error": "ValueError", "message": "boom"},
    )
    [run] = await lg.runs.list(thread["thread_id"])
    assert run["status"] == "error"
    assert (await lg.threads.get(thread["thread_id"]))["status"] == "error"
    waited = await lg.runs.wait(thread["thread_id"], "boom", input={"path": []}, raise_error=False)
    assert waited == {"__error__": {"error": "ValueError", "message": "boom"}}


async def test_a_finished_run_is_deleted(lg: LangGraphClient) -> None:
    thread = await lg.threads.create()
    run = await lg.runs.create(thread["thread_id"], "counter", input={"count": 1})
    await lg.runs.join(thread["thread_id"], run["run_id"])
    await lg.runs.delete(thread["thread_id"], run["run_id"])
    with pytest.raises(NotFoundError):
        await lg.runs.get(thread["thread_id"], run["run_id"])
    assert await lg.runs.list(thread["thread_id"]) == []
    state = await lg.threads.get_state(thread["thread_id"])
    assert (state["values"], state["checkpoint"]) == ({}, None), (
        state
    )  # its checkpoints went with it
