"""runq's events as AI SDK UI message stream chunks (app/api/protocols/ai_sdk_chunks.py): the
mapping, the approval traps, retried attempts, stable frames, and the fold into a UIMessage."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.api.protocols.ai_sdk_chunks import (
    DONE,
    ChunkMapper,
    fold,
    frame,
    frames,
    without_retried_text,
)

RUN = "7d0c1f6e-0000-4000-8000-000000000001"
WAIT = "9a1b2c3d-0000-4000-8000-000000000002"
CALL = {"tool_call_id": "call_1", "name": "shell", "arguments": {"command": "ls"}}


def mapped(events: list[tuple[str, dict[str, Any]]], mapper: ChunkMapper | None = None) -> list[dict[str, Any]]:
    mapper = mapper or ChunkMapper(RUN)
    out: list[dict[str, Any]] = []
    for seq, (type_, data) in enumerate(events, start=1):
        out += mapper.map(seq, type_, data)
    return out


def test_a_run_with_text_and_a_tool() -> None:
    chunks = mapped(
        [
            ("run.queued", {}),
            ("run.started", {"attempt": 1}),
            ("message.delta", {"text": "hel"}),
            ("message.delta", {"text": "lo"}),
            ("message.completed", {"text": "hello"}),
            ("tool.call", CALL),
            ("tool.result", {"tool_call_id": "call_1", "output": {"exit_code": 0}, "is_error": False}),
            ("run.completed", {"output": {"text": "hello"}}),
        ]
    )
    text_id = f"{RUN}-3"  # the run and the seq of the first delta
    tool = {"toolCallId": "call_1", "toolName": "shell", "dynamic": True}
    assert chunks == [
        {"type": "data-runq-run.queued", "data": {}},
        {"type": "start-step"},
        {"type": "text-start", "id": text_id},
        {"type": "text-delta", "id": text_id, "delta": "hel"},
        {"type": "text-delta", "id": text_id, "delta": "lo"},
        {"type": "text-end", "id": text_id},
        {"type": "tool-input-start", **tool},
        {"type": "tool-input-available", **tool, "input": {"command": "ls"}},
        {"type": "tool-output-available", "toolCallId": "call_1", "output": {"exit_code": 0}},
        {"type": "finish-step"},
        {"type": "finish"},
    ]


def test_an_unstreamed_turn_is_one_text_part_and_an_empty_one_none() -> None:
    chunks = mapped([("run.started", {}), ("message.completed", {"text": ""}), ("message.completed", {"text": "hi"})])
    assert [c["type"] for c in chunks] == ["start-step", "text-start", "text-delta", "text-end"]


def test_the_approval_wait_shows_the_tool_once_and_a_denial_is_output_denied() -> None:
    """The openai agent emits no tool.call before it waits: the part comes from the payload, and
    the tool.call after a denial adds none; the error result the model got is not shown."""
    mapper = ChunkMapper(RUN)
    waiting = mapped(
        [("run.started", {}), ("run.waiting", {"waitpoint_id": WAIT, "name": "approval", "payload": CALL})], mapper
    )
    assert [c["type"] for c in waiting] == [
        "start-step", "tool-input-start", "tool-input-available", "tool-approval-request", "finish-step",
    ]  # fmt: skip
    assert waiting[3] == {"type": "tool-approval-request", "approvalId": WAIT, "toolCallId": "call_1"}
    assert mapper.waiting and mapper.finish_at_wait() == [{"type": "finish"}]

    # The continuation after the client's answer: a fresh mapper that knows the waitpoint.
    continuation = ChunkMapper(RUN)
    continuation.resuming({"waitpoint_id": WAIT, "name": "approval", "payload": CALL})
    denied = mapped(
        [
            ("run.resumed", {"waitpoint_id": WAIT, "value": {"approved": False, "note": "no"}}),
            ("run.started", {}),
            ("tool.call", CALL),
            ("tool.result", {"tool_call_id": "call_1", "output": "denied: no", "is_error": True}),
            ("message.completed", {"text": "ok"}),
            ("run.completed", {}),
        ],
        continuation,
    )
    assert [c["type"] for c in denied] == [
        "tool-output-denied", "start-step", "text-start", "text-delta", "text-end", "finish-step", "finish",
    ]  # fmt: skip


def test_an_approved_call_then_shows_its_output() -> None:
    chunks = mapped(
        [
            ("run.waiting", {"waitpoint_id": WAIT, "name": "approval", "payload": CALL}),
            ("run.resumed", {"waitpoint_id": WAIT, "value": {"approved": True}}),
            ("run.started", {}),
            ("tool.call", CALL),
            ("tool.result", {"tool_call_id": "call_1", "output": "x", "is_error": False}),
        ]
    )
    assert [c["type"] for c in chunks].count("tool-input-start") == 1
    assert chunks[-1] == {"type": "tool-output-available", "toolCallId": "call_1", "output": "x"}


def test_other_waits_and_events_are_data_parts() -> None:
    chunks = mapped([("run.waiting", {"waitpoint_id": WAIT, "name": "go", "payload": {}}), ("custom.thing", {"a": 1})])
    assert chunks[0]["type"] == "data-runq-run.waiting"
    assert chunks[-1] == {"type": "data-runq-custom.thing", "data": {"a": 1}}


def test_failure_cancel_and_tool_errors() -> None:
    assert mapped([("run.started", {}), ("run.failed", {"error_code": "x", "error_message": "boom"})])[-1] == {
        "type": "error",
        "errorText": "boom",
    }
    cancelled = mapped([("run.started", {}), ("message.delta", {"text": "a"}), ("run.cancelled", {"reason": "user"})])
    assert [c["type"] for c in cancelled][-3:] == ["text-end", "finish-step", "abort"]
    error = mapped([("tool.result", {"tool_call_id": "c", "output": {"exit_code": 1}, "is_error": True})])
    assert error == [{"type": "tool-output-error", "toolCallId": "c", "errorText": '{"exit_code":1}'}]


def test_a_retried_attempts_text_is_left_out_of_a_replay() -> None:
    events = [
        (1, "run.queued", {}),
        (2, "run.started", {"attempt": 1}),
        (3, "message.delta", {"text": "par"}),
        (4, "tool.call", CALL),
        (5, "run.retrying", {"attempt": 1}),
        (6, "run.started", {"attempt": 2}),
        (7, "message.delta", {"text": "whole"}),
    ]
    assert [seq for seq, _, _ in without_retried_text(events)] == [1, 2, 4, 5, 6, 7]


def test_frames_are_derived_from_the_log_so_a_replay_is_byte_identical() -> None:
    events = [(1, "run.started", "{}"), (2, "message.delta", '{"text": "é"}'), (3, "run.completed", "{}")]
    once = frames(ChunkMapper(RUN), events)
    assert once == frames(ChunkMapper(RUN), events)
    assert b"\r" not in once and once.startswith(b"id: 1\ndata: {")
    assert frame(2, {"type": "text-delta"}) == b'id: 2\ndata: {"type":"text-delta"}\n\n'
    assert DONE == b"data: [DONE]\n\n"
    # Nothing after the end of the message.
    assert frames(ChunkMapper(RUN), [*events, (4, "run.queued", "{}")]) == once


@pytest.mark.parametrize("text", ["plain", 'a "quote"', "back\\slash", "é 😀", "tab\tnew\nline", "\u001f", "\\", '"}'])
def test_a_tokens_chunk_copied_from_its_stored_json_is_the_chunk_built_from_its_value(text: str) -> None:
    """The fast path (the stored JSON string copied into the chunk) gives the bytes the mapper
    gives; a token with more than its text takes the mapper's path."""

    def stored(data: dict[str, object]) -> str:  # as PostgreSQL prints jsonb: ", " and ": "
        return json.dumps(data, ensure_ascii=False)

    events = [(1, "run.started", "{}"), (2, "message.delta", stored({"text": "first"})),
              (3, "message.delta", stored({"text": text})), (4, "message.delta", stored({"text": text, "index": 1}))]
    fast = frames(ChunkMapper(RUN), events)
    mapper = ChunkMapper(RUN)
    slow = b"".join(frame(seq, chunk) for seq, type_, data in events for chunk in mapper.map(seq, type_, json.loads(data)))
    assert fast == slow


def test_fold_builds_the_message_use_chat_builds() -> None:
    mapper = ChunkMapper(RUN)
    chunks = mapped(
        [
            ("run.started", {}),
            ("message.delta", {"text": "hi"}),
            ("message.completed", {"text": "hi"}),
            ("run.waiting", {"waitpoint_id": WAIT, "name": "approval", "payload": CALL}),
        ],
        mapper,
    )
    message = fold(RUN, chunks, {"run_id": RUN})
    assert message == {
        "id": RUN,
        "role": "assistant",
        "metadata": {"run_id": RUN},
        "parts": [
            {"type": "step-start"},
            {"type": "text", "text": "hi", "state": "done"},
            {
                "type": "dynamic-tool", "toolName": "shell", "toolCallId": "call_1", "state": "approval-requested",
                "input": {"command": "ls"}, "approval": {"id": WAIT},
            },
        ],
    }  # fmt: skip
    assert json.loads(json.dumps(message)) == message
