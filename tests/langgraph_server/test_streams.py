"""LangGraph's stream modes and stream resumption over the official Python SDK, against runq's
``/langgraph`` and LangGraph's own ``langgraph dev`` (DESIGN §17): the modes asked for, model
tokens as messages, LangChain's callback events, subgraphs under their namespace, and joining a
stream by ``Last-Event-ID``. Cases marked ``runq_only`` are where runq is stronger and say how."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from langgraph_sdk.client import LangGraphClient

from tests.fakes.openai_server import answer
from tests.langgraph_server.conftest import Server, runq_only
from tests.langgraph_server.support import collect, frames, gated_run


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
    run = await gated_run(lg, thread_id, tmp_path / "never", stream_mode=["events"])
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
