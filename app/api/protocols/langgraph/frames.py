"""runq's stored events as LangGraph's SSE frames (DESIGN §17), a pure function of the events
so a stream resumed with ``Last-Event-ID`` is byte-identical to its first delivery.

``run.queued`` opens the stream as ``metadata {run_id, attempt}``; each ``langgraph`` event
(the stream modes the run asked for, stored by the graph's agent) is its own frame; a run that
failed sends ``error``. Every frame's id is its event's seq. There is no ``end`` frame: the
stream closes, as the reference's does."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

from sse_starlette import ServerSentEvent


def frame_parts(
    run_id: uuid.UUID, events: Iterable[tuple[int, str, str]]
) -> Iterator[tuple[int, str, Any]]:
    """``(id, event, data)`` of the frames the events make, in order."""
    for seq, type_, data in events:
        if type_ == "run.queued":
            yield seq, "metadata", {"run_id": str(run_id), "attempt": 1}
        elif type_ == "langgraph":
            stored = json.loads(data)
            yield seq, stored["event"], stored["data"]
        elif type_ == "run.failed":
            failed = json.loads(data)
            yield (
                seq,
                "error",
                {
                    "error": failed.get("error_code") or "error",
                    "message": failed.get("error_message"),
                },
            )


def encode_frames(run_id: uuid.UUID, events: Iterable[tuple[int, str, str]]) -> bytes:
    return b"".join(
        ServerSentEvent(
            id=str(seq), event=event, data=json.dumps(data, separators=(",", ":"))
        ).encode()
        for seq, event, data in frame_parts(run_id, events)
    )
