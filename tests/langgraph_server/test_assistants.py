"""Assistants of one's own over the official Python SDK, against runq and the reference alike
(ids and times aside): created, read, patched into versions, rolled back, run with their config
and deleted. A default assistant is the ``langgraph.json``'s: runq refuses to change it, where
``langgraph dev`` changes its in-memory copy until the next start (a runq-only case)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import APIStatusError, ConflictError, NotFoundError

from tests.langgraph_server.conftest import Server, runq_only
from tests.langgraph_server.support import NAMESPACE

SHOWN = ("graph_id", "config", "context", "metadata", "name", "description", "version")


def shown(assistant: Any) -> tuple[Any, ...]:
    """What both servers answer alike: all but the ids and times."""
    return tuple(assistant[key] for key in SHOWN)


async def test_an_assistant_is_created_versioned_run_and_deleted(lg: LangGraphClient) -> None:
    tag = uuid.uuid4().hex
    made = await lg.assistants.create(
        "toned", config={"configurable": {"tone": "dry"}}, metadata={"tag": tag}, name="Dry one", description="terse"
    )
    assistant_id = made["assistant_id"]
    expected = ("toned", {"configurable": {"tone": "dry"}}, {"tone": "dry"}, {"tag": tag}, "Dry one", "terse", 1)
    assert shown(made) == expected
    assert shown(await lg.assistants.get(assistant_id)) == expected
    with pytest.raises(ConflictError):
        await lg.assistants.create("toned", assistant_id=assistant_id)
    kept = await lg.assistants.create("toned", assistant_id=assistant_id, if_exists="do_nothing")
    assert shown(kept) == expected

    found = await lg.assistants.search(metadata={"tag": tag})
    assert [a["assistant_id"] for a in found] == [assistant_id]
    assert [a["assistant_id"] for a in await lg.assistants.search(graph_id="toned", name="dry one", limit=100)] == [
        assistant_id
    ]
    assert await lg.assistants.count(metadata={"tag": tag}) == 1

    patched = await lg.assistants.update(assistant_id, context={"tone": "warm"}, metadata={"step": 2})
    assert shown(patched) == (
        "toned", {"configurable": {"tone": "warm"}}, {"tone": "warm"}, {"tag": tag, "step": 2}, "Dry one", "terse", 2
    )  # fmt: skip
    versions = await lg.assistants.get_versions(assistant_id)
    assert [(v["version"], v["config"]) for v in versions] == [
        (2, {"configurable": {"tone": "warm"}}),
        (1, {"configurable": {"tone": "dry"}}),
    ]
    assert [v["version"] for v in await lg.assistants.get_versions(assistant_id, metadata={"step": 2})] == [2]
    assert [v["version"] for v in await lg.assistants.get_versions(assistant_id, limit=1, offset=1)] == [1]

    thread = await lg.threads.create()
    assert (await lg.runs.wait(thread["thread_id"], assistant_id, input={}))["tone"] == "warm"
    latest = await lg.assistants.set_latest(assistant_id, 1)
    assert (latest["version"], latest["config"]) == (1, {"configurable": {"tone": "dry"}})
    assert (await lg.assistants.get(assistant_id))["version"] == 1
    assert (await lg.runs.wait(None, assistant_id, input={}))["tone"] == "dry"
    ran = await lg.runs.wait(None, assistant_id, input={}, config={"configurable": {"tone": "loud"}})
    assert ran["tone"] == "loud"  # the run's own config over its assistant's

    with pytest.raises(NotFoundError):
        await lg.assistants.set_latest(assistant_id, 9)
    await lg.assistants.delete(assistant_id)
    with pytest.raises(NotFoundError):
        await lg.assistants.get(assistant_id)
    with pytest.raises(NotFoundError):
        await lg.assistants.delete(assistant_id)
    with pytest.raises(NotFoundError):
        await lg.assistants.update(assistant_id, metadata={"step": 3})


async def test_an_assistant_of_an_unknown_graph_is_404(lg: LangGraphClient) -> None:
    with pytest.raises(NotFoundError):
        await lg.assistants.create("no-such-graph")


async def test_config_configurable_and_context_together_are_400(lg: LangGraphClient) -> None:
    with pytest.raises(APIStatusError) as refused:
        await lg.assistants.create("toned", config={"configurable": {"tone": "a"}}, context={"tone": "b"})
    assert refused.value.response.status_code == 400


async def test_a_default_assistant_is_not_changed(server: Server, lg: LangGraphClient) -> None:
    runq_only(server, "its default assistants are the langgraph.json's; langgraph dev deletes its in-memory copy")
    default = str(uuid.uuid5(NAMESPACE, "toned"))
    for change in (
        lg.assistants.delete(default),
        lg.assistants.update(default, metadata={"x": 1}),
        lg.assistants.set_latest(default, 1),
    ):
        with pytest.raises(ConflictError):
            await change
    assert [v["version"] for v in await lg.assistants.get_versions(default)] == [1]
    assert (await lg.assistants.get(default))["graph_id"] == "toned"
