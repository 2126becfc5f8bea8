"""runq events as AG-UI events: the mapping table, ids unique per thread, closing before each
ending, nothing ``null``, LF-only frames, and the state a stream resumed mid-run rebuilds."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.api.protocols.ag_ui_events import Segment, frames, translate_page

RUN = "0b7c9a52-5b0c-4a8e-9c4e-2f7d3e1a6b10"
THREAD = "8e2f1d3c-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
WAIT = "5d1e0c7a-3f4b-4c2a-9e8d-1a2b3c4d5e6f"


def segment() -> Segment:
    return Segment(thread_id="chat-1", client_run_id="client-run", run_id=RUN, runq_thread_id=THREAD)


def run_all(seg: Segment, events: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for seq, (type_, data) in enumerate(events, start=1):
        out += seg.translate(seq, type_, data)
    return out


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


DEMO = [
    ("run.queued", {}),
    ("run.started", {"attempt": 1}),
    ("message.delta", {"text": "hello "}),
    ("message.delta", {"text": "world"}),
    ("message.completed", {"text": "hello world"}),
    ("tool.call", {"tool_call_id": "step_1", "name": "sleep", "arguments": {"seconds": 0}}),
    ("tool.result", {"tool_call_id": "step_1", "name": "sleep", "output": "step 1 of 1 done", "is_error": False}),
    ("run.completed", {"output": {"echo": "hello world"}}),
]


def test_a_demo_run_maps_to_the_protocols_events() -> None:
    seg = segment()
    events = seg.prelude() + run_all(seg, DEMO)
    assert types(events) == [
        "RUN_STARTED", "CUSTOM", "CUSTOM", "STEP_STARTED",
        "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
        "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT",
        "STEP_FINISHED", "RUN_FINISHED",
    ]  # fmt: skip
    assert events[0] == {"type": "RUN_STARTED", "threadId": "chat-1", "runId": "client-run"}
    assert events[1] == {"type": "CUSTOM", "name": "runq.run", "value": {"run_id": RUN, "thread_id": THREAD}}
    assert events[2] == {"type": "CUSTOM", "name": "runq.run.queued", "value": {}}
    message_id = f"{RUN}:3"  # the run and the seq of the first delta
    assert events[4] == {"type": "TEXT_MESSAGE_START", "messageId": message_id, "role": "assistant"}
    assert "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT") == "hello world"
    call = f"{RUN}/step_1"
    assert events[8] == {
        "type": "TOOL_CALL_START", "toolCallId": call, "toolCallName": "sleep", "parentMessageId": message_id,
    }  # fmt: skip
    assert events[9] == {"type": "TOOL_CALL_ARGS", "toolCallId": call, "delta": '{"seconds":0}'}
    assert events[11] == {
        "type": "TOOL_CALL_RESULT", "messageId": f"{RUN}:7:result", "toolCallId": call,
        "content": "step 1 of 1 done", "role": "tool",
    }  # fmt: skip
    assert events[-1] == {
        "type": "RUN_FINISHED", "threadId": "chat-1", "runId": "client-run",
        "result": {"echo": "hello world"}, "outcome": {"type": "success"},
    }  # fmt: skip
    assert seg.ended


def test_nothing_is_null_and_a_completed_run_without_output_has_no_result() -> None:
    seg = segment()
    events = run_all(seg, [("run.started", {"attempt": 1}), ("run.completed", {"output": None})])
    assert "result" not in events[-1]
    assert "null" not in json.dumps(events)


def test_a_message_sent_whole_opens_and_closes_itself() -> None:
    seg = segment()
    events = run_all(seg, [("run.started", {"attempt": 1}), ("message.completed", {"text": "all at once"})])
    assert types(events) == ["STEP_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END"]


def test_a_retry_closes_what_is_open_and_a_repeated_tool_call_is_shown_once() -> None:
    seg = segment()
    events = run_all(
        seg,
        [
            ("run.started", {"attempt": 1}),
            ("tool.call", {"tool_call_id": "step_1", "name": "sleep", "arguments": {}}),
            ("message.delta", {"text": "partial"}),
            ("run.retrying", {"attempt": 1, "error_code": "boom", "available_at": "2026-01-01T00:00:00Z"}),
            ("run.started", {"attempt": 2}),
            ("tool.call", {"tool_call_id": "step_1", "name": "sleep", "arguments": {}}),
            ("run.failed", {"error_code": "boom", "error_message": "it broke"}),
        ],
    )
    assert types(events) == [
        "STEP_STARTED", "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "STEP_FINISHED", "CUSTOM", "STEP_STARTED",
        "STEP_FINISHED", "RUN_ERROR",
    ]  # fmt: skip
    assert events[-1] == {"type": "RUN_ERROR", "message": "it broke", "code": "boom"}
    assert events[9]["stepName"] == "attempt 2"


def test_a_wait_is_an_interrupt_that_ends_the_segment() -> None:
    seg = segment()
    events = run_all(
        seg,
        [
            ("run.started", {"attempt": 1}),
            ("message.delta", {"text": "thinking"}),
            ("run.waiting", {"waitpoint_id": WAIT, "name": "review", "payload": {"prompt": "p"},
                             "expires_at": "2026-12-03T06:00:00+00:00"}),
            ("run.resumed", {"waitpoint_id": WAIT, "value": True}),
        ],
    )  # fmt: skip
    assert types(events) == [
        "STEP_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "STEP_FINISHED",
        "RUN_FINISHED",
    ]  # fmt: skip
    assert events[-1]["outcome"] == {
        "type": "interrupt",
        "interrupts": [
            {"id": WAIT, "reason": "review", "expiresAt": "2026-12-03T06:00:00+00:00",
             "metadata": {"payload": {"prompt": "p"}}}
        ],
    }  # fmt: skip


def test_an_approval_shows_its_tool_call_once_and_names_it() -> None:
    seg = segment()
    payload = {"tool_call_id": "call_1", "name": "shell", "arguments": '{"command": "ls"}'}
    events = run_all(
        seg,
        [("run.started", {"attempt": 1}), ("run.waiting", {"waitpoint_id": WAIT, "name": "approval", "payload": payload})],
    )
    assert types(events)[:4] == ["STEP_STARTED", "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"]
    assert events[2]["delta"] == '{"command": "ls"}'
    assert events[-1]["outcome"]["interrupts"][0]["toolCallId"] == f"{RUN}/call_1"
    # the resumed run's stream knows the call was shown: its tool.call adds nothing
    seg.ended = False
    assert seg.translate(5, "tool.call", {"tool_call_id": "call_1", "name": "shell", "arguments": {}}) == []


def test_a_cancel_finishes_with_the_cancelled_outcome() -> None:
    seg = segment()
    events = run_all(
        seg,
        [("run.started", {"attempt": 1}), ("message.delta", {"text": "a"}), ("run.cancel_requested", {"reason": "user"}),
         ("run.cancelled", {"reason": "user"})],
    )  # fmt: skip
    assert types(events)[-5:] == ["CUSTOM", "TEXT_MESSAGE_END", "STEP_FINISHED", "CUSTOM", "RUN_FINISHED"]
    assert events[-2] == {"type": "CUSTOM", "name": "runq.run.cancelled", "value": {"reason": "user"}}
    assert events[-1]["outcome"] == {"type": "cancelled"}


def test_other_events_are_custom_events() -> None:
    assert segment().translate(4, "graph.node", {"node": "a"}) == [
        {"type": "CUSTOM", "name": "runq.graph.node", "value": {"node": "a"}}
    ]


def test_a_stream_resumed_mid_message_reopens_the_step_and_the_message() -> None:
    live = segment()
    whole = run_all(live, DEMO)
    resumed = segment()
    resumed.catch_up([(seq, t, d) for seq, (t, d) in enumerate(DEMO[:3], start=1)])
    prelude = resumed.prelude()
    assert types(prelude) == ["RUN_STARTED", "CUSTOM", "STEP_STARTED", "TEXT_MESSAGE_START"]
    assert prelude[3]["messageId"] == f"{RUN}:3"
    rest = [e for seq, (t, d) in enumerate(DEMO[3:], start=4) for e in resumed.translate(seq, t, d)]
    assert rest == whole[4:]  # from the second delta on, as the live stream sent it


def test_a_stream_resumed_after_a_wait_starts_the_next_segment() -> None:
    seg = segment()
    before = [
        (1, "run.started", {"attempt": 1}),
        (2, "run.waiting", {"waitpoint_id": WAIT, "name": "w", "payload": None}),
    ]
    seg.catch_up(before)
    assert not seg.ended and seg.step is None
    assert types(seg.translate(3, "run.resumed", {"waitpoint_id": WAIT, "value": 1})) == ["CUSTOM"]


def test_frames_carry_the_seq_and_end_in_lf_only() -> None:
    body = frames(7, [{"type": "CUSTOM", "name": "x", "value": "é"}, {"type": "RUN_ERROR", "message": "m"}])
    assert b"\r" not in body
    assert body == (
        'id: 7\ndata: {"type":"CUSTOM","name":"x","value":"é"}\n\n'
        'id: 7\ndata: {"type":"RUN_ERROR","message":"m"}\n\n'
    ).encode()


def test_a_page_of_stored_events_is_translated_until_the_segment_ends() -> None:
    seg = segment()
    page = [(1, "run.started", '{"attempt": 1}'), (2, "run.completed", "{}"), (3, "run.queued", "{}")]
    body = translate_page(seg, page).decode()
    assert body.count("id: 1\n") == 1 and body.count("id: 2\n") == 2 and "id: 3" not in body


@pytest.mark.parametrize("text", ["plain", 'a "quote"', "back\\slash", "é 😀", "tab\tnew\nline", "\u001f", '"}'])
def test_a_tokens_frame_copied_from_its_stored_json_is_the_frame_built_from_its_value(text: str) -> None:
    """The fast path (the stored JSON string copied into the frame) gives the bytes the
    translation gives; a token with more than its text, or none, takes the translation's path."""

    def stored(data: dict[str, Any]) -> str:  # as PostgreSQL prints jsonb: ", " and ": "
        return json.dumps(data, ensure_ascii=False)

    page = [(1, "run.started", '{"attempt": 1}'), (2, "message.delta", stored({"text": "first"})),
            (3, "message.delta", stored({"text": text})), (4, "message.delta", stored({"text": ""})),
            (5, "message.delta", stored({"text": text, "index": 1})), (6, "run.completed", "{}")]
    slow_segment = segment()
    slow = b"".join(frames(seq, slow_segment.translate(seq, t, json.loads(d))) for seq, t, d in page)
    assert translate_page(segment(), page) == slow
