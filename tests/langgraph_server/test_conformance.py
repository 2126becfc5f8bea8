"""LangGraph's server API, once, over the official Python SDK (``langgraph_sdk``): each case
passes against runq's ``/langgraph`` and against LangGraph's own ``langgraph dev`` (DESIGN §17),
ids and times aside. Cases marked ``runq_only`` are where runq is stronger and say how."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import ConflictError, NotFoundError

from tests.fakes.openai_server import answer
from tests.langgraph_server.conftest import Server, runq_only
from tests.worker_support import wait_until

NAMESPACE = uuid.UUID("6ba7b821-9dad-11d1-80b4-00c04fd430c8")
WITHIN_S = 30.0


def frames(parts: list[Any]) -> list[tuple[str, Any]]:
    """A stream as ``(event, data)``, ids and times aside."""
    return [(p.event, p.data) for p in parts if p.event != "metadata"]


async def collect(stream: Any) -> list[Any]:
    return [part async for part in stream]


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


async def test_a_stream_sends_the_modes_asked_for(lg: LangGraphClient) -> None:
    thread = await lg.threads.create()
    parts = await collect(
        lg.runs.stream(
            thread["thread_id"],
            "counter",
            input={"count": 2},
            stream_mode=["values", "updates", "custom"],
        )
    )
    assert parts[0].event == "metadata" and set(parts[0].data) == {"run_id", "attempt"}
    assert frames(parts) == [
        ("values", {"count": 2, "steps": []}),
        ("custom", {"at": "one", "count": 2}),
        ("updates", {"one": {"count": 3, "steps": ["one"]}}),
        ("values", {"count": 3, "steps": ["one"]}),
        ("updates", {"two": {"count": 30, "steps": ["two"]}}),
        ("values", {"count": 30, "steps": ["one", "two"]}),
    ]


async def test_model_tokens_stream_as_messages(server: Server, lg: LangGraphClient) -> None:
    server.model.script(answer("Hello there"))
    thread = await lg.threads.create()
    parts = await collect(
        lg.runs.stream(
            thread["thread_id"],
            "chat",
            input={"messages": [{"role": "user", "content": "hi"}]},
            stream_mode="messages-tuple",
        )
    )
    messages = [p.data for p in parts if p.event == "messages"]
    assert "".join(chunk["content"] for chunk, _ in messages) == "Hello there"
    assert {chunk["type"] for chunk, _ in messages} == {"AIMessageChunk"}
    assert {meta["langgraph_node"] for _, meta in messages} == {"model"}
    state = await lg.threads.get_state(thread["thread_id"])
    assert [m["type"] for m in state["values"]["messages"]] == ["human", "ai"]


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


async def _gated_run(
    lg: LangGraphClient, thread_id: str, gate: Path, **fields: Any
) -> dict[str, Any]:
    run = await lg.runs.create(
        thread_id, "gated", input={"gate": str(gate), "passed": False}, **fields
    )

    async def running() -> bool:
        return (await lg.runs.get(thread_id, run["run_id"]))["status"] == "running"

    await wait_until(running, within=WITHIN_S, what="the gated run running")
    return run


async def test_reject_answers_409_while_the_thread_is_busy(
    lg: LangGraphClient, tmp_path: Path
) -> None:
    thread = await lg.threads.create()
    gate = tmp_path / "gate"
    run = await _gated_run(lg, thread["thread_id"], gate)
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
    run = await _gated_run(lg, thread["thread_id"], tmp_path / "never")
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


async def test_update_state_then_run_from_it(lg: LangGraphClient) -> None:
    thread = await lg.threads.create()
    await lg.runs.wait(thread["thread_id"], "counter", input={"count": 1})
    await lg.threads.update_state(thread["thread_id"], {"count": 5}, as_node="one")
    state = await lg.threads.get_state(thread["thread_id"])
    assert state["values"]["count"] == 5 and state["next"] == ["two"]
    assert (await lg.threads.get(thread["thread_id"]))["values"] == state["values"]
    assert (await lg.runs.wait(thread["thread_id"], "counter", input=None))["count"] == 50


async def test_a_run_from_an_earlier_checkpoint_forks_the_thread(lg: LangGraphClient) -> None:
    thread_id = (await lg.threads.create())["thread_id"]
    assert await lg.runs.wait(thread_id, "counter", input={"count": 1}) == {
        "count": 20,
        "steps": ["one", "two"],
    }
    first = (await lg.threads.get_state(thread_id))["checkpoint"]["checkpoint_id"]
    second = await lg.runs.wait(thread_id, "counter", input={"count": 5})
    assert second == {"count": 60, "steps": ["one", "two", "one", "two"]}
    forked = await lg.runs.wait(thread_id, "counter", input={"count": 2}, checkpoint_id=first)
    assert forked == {"count": 30, "steps": ["one", "two", "one", "two"]}  # on the first's state
    state = await lg.threads.get_state(thread_id)
    assert (state["values"], state["next"]) == (forked, [])
    assert (await lg.threads.get(thread_id))["values"] == forked
    history = await lg.threads.get_history(thread_id, limit=4)  # the fork's: input, 3 steps
    assert history[-1]["metadata"]["source"] == "input"
    assert history[-1]["parent_checkpoint"]["checkpoint_id"] == first
    # The same with ``checkpoint`` (what the SDK sends for a subgraph's too), streamed.
    parts = await collect(
        lg.runs.stream(
            thread_id,
            "counter",
            input={"count": 3},
            checkpoint={"checkpoint_id": first, "checkpoint_ns": ""},
            stream_mode="values",
        )
    )
    assert frames(parts)[-1] == ("values", {"count": 40, "steps": ["one", "two", "one", "two"]})
    # A run after the fork goes on from it (the thread's newest state).
    assert (await lg.runs.wait(thread_id, "counter", input={"count": 0}))["steps"] == [
        "one",
        "two",
    ] * 3


async def test_a_run_from_an_unknown_checkpoint_starts_from_nothing(lg: LangGraphClient) -> None:
    thread_id = (await lg.threads.create())["thread_id"]
    await lg.runs.wait(thread_id, "counter", input={"count": 1})
    # LangGraph's saver finds no such checkpoint: the graph starts as on a new thread.
    out = await lg.runs.wait(
        thread_id, "counter", input={"count": 2}, checkpoint_id=str(uuid.uuid4())
    )
    assert out == {"count": 30, "steps": ["one", "two"]}
    assert (await lg.threads.get_state(thread_id))["values"] == out
    with pytest.raises(httpx.HTTPStatusError) as refused:  # not a UUID
        await lg.runs.wait(thread_id, "counter", input={"count": 2}, checkpoint_id="nope")
    assert refused.value.response.status_code == 422


async def test_a_stream_resumes_after_any_frame_without_stream_resumable(
    server: Server, lg: LangGraphClient
) -> None:
    runq_only(server, "every frame has an id and any run's stream resumes, with no flag and no TTL")
    thread = await lg.threads.create()
    first = await collect(
        lg.runs.stream(
            thread["thread_id"], "counter", input={"count": 2}, stream_mode=["values", "updates"]
        )
    )
    ids = [p.id for p in first]
    assert all(ids) and ids == sorted(ids, key=int) and len(set(ids)) == len(ids)
    [run] = await lg.runs.list(thread["thread_id"])
    for cut in range(len(first)):
        rest = await collect(
            lg.runs.join_stream(thread["thread_id"], run["run_id"], last_event_id=first[cut].id)
        )
        assert [(p.id, p.event, p.data) for p in rest] == [
            (p.id, p.event, p.data) for p in first[cut + 1 :]
        ]


async def test_a_resumed_stream_is_byte_identical(server: Server, lg: LangGraphClient) -> None:
    runq_only(server, "frames are a pure function of runq's event log")
    thread = await lg.threads.create()
    run = await lg.runs.create(
        thread["thread_id"], "counter", input={"count": 2}, stream_mode=["values"]
    )
    await lg.runs.join(thread["thread_id"], run["run_id"])
    path = f"/threads/{thread['thread_id']}/runs/{run['run_id']}/stream"
    async with server.http() as http:
        whole = (await http.get(path)).content
        again = (await http.get(path, headers={"Last-Event-ID": "-1"})).content
    assert whole == again and whole.startswith(b"id: ")


def callback_events(parts: list[Any]) -> list[tuple[Any, ...]]:
    """The ``events`` frames as ``(event, name, tags, depth, data)``: run ids and metadata aside."""
    return [
        (
            p.data["event"],
            p.data["name"],
            p.data["tags"],
            len(p.data["parent_ids"]),
            p.data["data"],
        )
        for p in parts
        if p.event == "events"
    ]


async def test_the_events_mode_sends_langchain_callback_events(lg: LangGraphClient) -> None:
    thread_id = (await lg.threads.create())["thread_id"]
    parts = await collect(
        lg.runs.stream(thread_id, "counter", input={"count": 1}, stream_mode=["events", "values"])
    )
    assert [p.event for p in parts] == ["metadata", "events", "values"] + [
        "events",
        "events",
        "events",
        "values",
    ] * 2 + ["events"]
    one, two = ({"count": 1, "steps": []}, {"count": 2, "steps": ["one"]})
    done = {"count": 20, "steps": ["one", "two"]}
    assert callback_events(parts) == [
        ("on_chain_start", "counter", [], 0, {"input": {"count": 1}}),
        ("on_chain_start", "one", ["graph:step:1"], 1, {"input": one}),
        ("on_chain_stream", "one", ["graph:step:1"], 1, {"chunk": two}),
        ("on_chain_end", "one", ["graph:step:1"], 1, {"input": one, "output": two}),
        ("on_chain_start", "two", ["graph:step:2"], 1, {"input": two}),
        ("on_chain_stream", "two", ["graph:step:2"], 1, {"chunk": {"count": 20, "steps": ["two"]}}),
        (
            "on_chain_end",
            "two",
            ["graph:step:2"],
            1,
            {"input": two, "output": {"count": 20, "steps": ["two"]}},
        ),
        ("on_chain_end", "counter", [], 0, {"output": done}),
    ]
    root = parts[1].data
    assert root["run_id"] == parts[0].data["run_id"]  # the root run is the LangGraph run
    assert root["metadata"]["thread_id"] == thread_id
    assert (await lg.threads.get_state(thread_id))["values"] == done


async def test_the_events_mode_sends_a_models_tokens(server: Server, lg: LangGraphClient) -> None:
    server.model.script(answer("Hello there"))
    thread_id = (await lg.threads.create())["thread_id"]
    parts = await collect(
        lg.runs.stream(
            thread_id,
            "chat",
            input={"messages": [{"role": "user", "content": "hi"}]},
            stream_mode="events",
        )
    )
    assert {p.event for p in parts} == {"metadata", "events"}
    kinds = [p.data["event"] for p in parts if p.event == "events"]
    assert kinds[0] == "on_chain_start" and kinds[-1] == "on_chain_end"
    assert {"on_chat_model_start", "on_chat_model_stream", "on_chat_model_end"} <= set(kinds)
    tokens = [
        p.data["data"]["chunk"] for p in parts[1:] if p.data["event"] == "on_chat_model_stream"
    ]
    assert "".join(t["content"] for t in tokens) == "Hello there"
    assert {t["type"] for t in tokens} == {"AIMessageChunk"}
    [end] = [p.data for p in parts[1:] if p.data["event"] == "on_chat_model_end"]
    assert end["data"]["output"]["content"] == "Hello there"
    assert end["metadata"]["langgraph_node"] == "model"


async def test_an_events_run_is_cancelled_mid_node(lg: LangGraphClient, tmp_path: Path) -> None:
    thread_id = (await lg.threads.create())["thread_id"]
    run = await _gated_run(lg, thread_id, tmp_path / "never", stream_mode=["events"])
    await lg.runs.cancel(thread_id, run["run_id"], wait=True)
    assert (await lg.runs.get(thread_id, run["run_id"]))["status"] == "interrupted"
    (tmp_path / "open").touch()
    parts = await collect(
        lg.runs.stream(
            thread_id, "gated", input={"gate": str(tmp_path / "open")}, stream_mode="events"
        )
    )
    assert [p.data["name"] for p in parts if p.event == "events"] == ["gated"] + ["wait"] * 3 + [
        "gated"
    ]


async def test_an_events_stream_resumes_byte_for_byte(server: Server, lg: LangGraphClient) -> None:
    runq_only(server, "every events frame is stored before it is sent, with an id of runq's log")
    thread_id = (await lg.threads.create())["thread_id"]
    body = {"assistant_id": "counter", "input": {"count": 1}, "stream_mode": ["events", "updates"]}
    async with server.http() as http:
        live = (await http.post(f"/threads/{thread_id}/runs/stream", json=body)).content
        [run] = await lg.runs.list(thread_id)
        path = f"/threads/{thread_id}/runs/{run['run_id']}/stream"
        again = (await http.get(path, headers={"Last-Event-ID": "-1"})).content
        ids = re.findall(rb"^id: (\d+)\r?$", live, flags=re.MULTILINE)
        middle_id = ids[len(ids) // 2].decode()
        rest = (await http.get(path, headers={"Last-Event-ID": middle_id})).content
    assert live == again and b"event: events" in live
    assert live.endswith(rest) and rest.startswith(b"id: ") and len(rest) < len(live)


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
    run = await _gated_run(browser, mine["thread_id"], tmp_path / "never")
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
    run = await _gated_run(lg, thread["thread_id"], gate)
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


async def test_a_forked_run_whose_worker_died_goes_on_from_the_fork(
    server: Server, lg: LangGraphClient, tmp_path: Path
) -> None:
    runq_only(server, "a retried attempt resumes the fork it began, never forks again")
    assert server.worker is not None
    thread_id = (await lg.threads.create())["thread_id"]
    (tmp_path / "open").touch()
    await lg.runs.wait(thread_id, "gated", input={"gate": str(tmp_path / "open")})
    first = (await lg.threads.get_state(thread_id))["checkpoint"]["checkpoint_id"]
    await lg.runs.wait(thread_id, "gated", input={"gate": str(tmp_path / "open"), "passed": False})
    gate = tmp_path / "gate"
    run = await _gated_run(lg, thread_id, gate, checkpoint_id=first)
    server.worker.kill_and_restart()
    gate.touch()
    assert await lg.runs.join(thread_id, run["run_id"]) == {"gate": str(gate), "passed": True}
    history = await lg.threads.get_history(thread_id, limit=3)  # the fork, forked once
    assert [h["metadata"]["source"] for h in history] == ["loop", "loop", "input"]
    assert history[2]["parent_checkpoint"]["checkpoint_id"] == first


async def test_deleting_a_busy_thread_cancels_its_run(lg: LangGraphClient, tmp_path: Path) -> None:
    thread = await lg.threads.create()
    await _gated_run(lg, thread["thread_id"], tmp_path / "never")
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
    run = await _gated_run(lg, thread["thread_id"], tmp_path / "never")
    await lg.runs.cancel(thread["thread_id"], run["run_id"], wait=True, action="rollback")
    with pytest.raises(NotFoundError):
        await lg.runs.get(thread["thread_id"], run["run_id"])
    assert run["run_id"] not in [r["run_id"] for r in await lg.runs.list(thread["thread_id"])]
    after = await lg.threads.get_state(thread["thread_id"])
    assert after["values"] == before["values"] == {"gate": str(opened), "passed": True}


async def test_cancel_many_by_run_ids(lg: LangGraphClient, tmp_path: Path) -> None:
    thread = await lg.threads.create()
    run = await _gated_run(lg, thread["thread_id"], tmp_path / "never")
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


async def test_subgraphs_stream_under_their_namespace(lg: LangGraphClient) -> None:
    thread = await lg.threads.create()
    parts = await collect(
        lg.runs.stream(
            thread["thread_id"],
            "nested",
            input={"path": []},
            stream_mode="updates",
            stream_subgraphs=True,
        )
    )
    # a namespace is "<node>:<task id>"; task ids differ between servers
    named = [(p.event.split(":")[0], p.data) for p in parts if p.event != "metadata"]
    assert named == [
        ("updates|child", {"inner": {"path": ["inner"]}}),
        ("updates", {"child": {"path": ["inner"]}}),
        ("updates", {"after": {"path": ["after"]}}),
    ]


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


async def test_the_state_of_a_thread_naming_no_served_graph_is_404(lg: LangGraphClient) -> None:
    thread = await lg.threads.create(metadata={"graph_id": "no-such-graph"})
    with pytest.raises(NotFoundError):
        await lg.threads.get_state(thread["thread_id"])
    assert (await lg.threads.get(thread["thread_id"]))["values"] is None
    fresh = await lg.threads.create()
    state = await lg.threads.get_state(fresh["thread_id"])
    assert (state["values"], state["next"], state["tasks"]) == ({}, [], [])


async def test_messages_mode_sends_each_message_so_far(server: Server, lg: LangGraphClient) -> None:
    server.model.script(answer("Hello there"))
    thread = await lg.threads.create()
    parts = await collect(
        lg.runs.stream(
            thread["thread_id"],
            "chat",
            input={"messages": [{"role": "user", "content": "hi"}]},
            stream_mode="messages",
        )
    )
    events = [p.event for p in parts]
    assert events[:2] == ["metadata", "messages/metadata"] and set(events[2:]) == {
        "messages/partial"
    }
    [(message_id, metadata)] = parts[1].data.items()
    assert metadata["metadata"]["langgraph_node"] == "model"
    contents = [p.data[0]["content"] for p in parts[2:]]
    assert contents[-1] == "Hello there" and contents == sorted(contents, key=len)
    assert {(p.data[0]["type"], p.data[0]["id"]) for p in parts[2:]} == {("ai", message_id)}


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
