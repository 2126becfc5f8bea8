"""The pure parts of LangGraph's server API (DESIGN §17): reading ``langgraph.json``, the
status mapping, and runq events as LangGraph's SSE frames."""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from app.agents.langgraph_config import GraphConfigError, graph_agents, load_graph, read_config
from app.api.protocols.langgraph.frames import encode_frames, frame_parts
from app.api.protocols.langgraph.status import run_status, thread_status
from app.domain import Run, Status, Thread

RUN_ID = uuid.UUID(int=7)


def test_frames_from_events() -> None:
    events = [
        (1, "run.queued", "{}"),
        (2, "run.started", '{"attempt": 1}'),
        (3, "langgraph", json.dumps({"event": "values", "data": {"n": 1}})),
        (4, "message.delta", '{"text": "hi"}'),
        (5, "langgraph", json.dumps({"event": "messages", "data": [{"content": "hi"}, {"step": 1}]})),
        (6, "run.failed", '{"error_code": "agent_error", "error_message": "boom"}'),
    ]
    assert list(frame_parts(RUN_ID, events)) == [
        (1, "metadata", {"run_id": str(RUN_ID), "attempt": 1}),
        (3, "values", {"n": 1}),
        (5, "messages", [{"content": "hi"}, {"step": 1}]),
        (6, "error", {"error": "agent_error", "message": "boom"}),
    ]
    assert encode_frames(RUN_ID, events[2:3]) == b'id: 3\r\nevent: values\r\ndata: {"n":1}\r\n\r\n'


def test_resumed_frames_are_the_tail_of_the_whole() -> None:
    events = [(seq, "langgraph", json.dumps({"event": "updates", "data": {"seq": seq}})) for seq in range(1, 6)]
    whole = encode_frames(RUN_ID, events)
    assert whole.endswith(encode_frames(RUN_ID, events[3:]))


def _run(status: Status, **fields: object) -> Run:
    now = datetime.now(UTC)
    run = Run(
        id=RUN_ID, tenant_id="t", agent="g", status=status, priority=0, attempts=1, max_attempts=3, input={},
        budget={}, output=None, available_at=now, created_at=now, updated_at=now, finished_at=None,
        cancel_requested_at=None, cancel_reason=None, error_code=None, error_message=None, on_disconnect="continue",
        disconnect_grace_s=30.0, last_event_seq=1, locked_by=None, locked_until=None,
    )  # fmt: skip
    return replace(run, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("run", "expected"),
    [
        (_run(Status.PENDING), "pending"),
        (_run(Status.LEASED), "running"),
        (_run(Status.DONE), "success"),
        (_run(Status.DEAD), "error"),
        (_run(Status.DEAD, error_code="timeout"), "timeout"),
        (_run(Status.CANCELLED, cancel_reason="interrupted"), "interrupted"),
    ],
)
def test_run_status(run: Run, expected: str) -> None:
    assert run_status(run) == expected


def _thread(busy: bool) -> Thread:
    now = datetime.now(UTC)
    return Thread(id=uuid.UUID(int=1), tenant_id="t", metadata={}, busy=busy,
                  created_at=now, updated_at=now, last_run_id=None, message_count=0)  # fmt: skip


@pytest.mark.parametrize(
    ("busy", "last", "expected"),
    [
        (False, None, "idle"),
        (True, _run(Status.LEASED), "busy"),
        (False, _run(Status.DEAD), "error"),
        (False, _run(Status.DONE, output={"values": {}, "next": [], "interrupts": {}}), "idle"),
        (False, _run(Status.DONE, output={"values": {}, "next": ["ask"], "interrupts": {"t": [{}]}}), "interrupted"),
        (False, _run(Status.DONE, output={"values": {}, "next": ["two"], "interrupts": {}}), "interrupted"),
        (False, _run(Status.CANCELLED), "idle"),
    ],
)
def test_thread_status(busy: bool, last: Run | None, expected: str) -> None:
    assert thread_status(_thread(busy), last) == expected


def test_a_config_names_its_unused_keys_once_and_resolves_paths(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "g.py").write_text("graph = 'a graph'\n")
    config = tmp_path / "langgraph.json"
    config.write_text(json.dumps({"graphs": {"one": "./sub/g.py:graph", "two": "json:dumps"}, "env": {}, "http": {}}))
    with caplog.at_level(logging.WARNING):
        assert graph_agents(config) == {
            "one": f"app.agents.langgraph.graphs:one@{config.resolve()}",
            "two": f"app.agents.langgraph.graphs:two@{config.resolve()}",
        }
        graph_agents(config)
    assert [r.getMessage() for r in caplog.records] == [f"{config.resolve()}: runq does not use the keys env, http"]
    loaded = read_config(config.resolve())
    assert load_graph(loaded.graphs["one"], base=tmp_path) == "a graph"
    assert load_graph(loaded.graphs["two"], base=tmp_path) is json.dumps


@pytest.mark.parametrize(
    "content", ["not json", '{"graphs": []}', '{"graphs": {"a": 1}}', "[]"], ids=["text", "list", "number", "array"]
)
def test_a_config_without_graphs_is_refused(tmp_path: Path, content: str) -> None:
    config = tmp_path / "langgraph.json"
    config.write_text(content)
    with pytest.raises(GraphConfigError):
        read_config(config)


def test_a_missing_graph_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(GraphConfigError, match="no file"):
        load_graph("./absent.py:graph", base=tmp_path)
    with pytest.raises(GraphConfigError, match="is not"):
        load_graph("nocolon", base=tmp_path)
