"""Agent values PostgreSQL cannot store (NUL, unpaired surrogates, NaN) must not cost a run its events.

A model or a tool can hand an agent any string: a NUL, or half of a surrogate pair split across
two streamed chunks. jsonb and text refuse both, and the run used to fail every attempt with
the events of each lost. The repository layer stores U+FFFD in their place instead, as the
shell tool already does for NUL in command output.
"""

from __future__ import annotations

import json
from typing import Any

from app.agents.base import RetryableError, RunContext
from app.domain import Status
from app.queue import Queue
from app.queue.codec import dumps as _dumps
from tests.worker_support import check_event_log, enqueue_demo, in_process_worker, wait_finished

AGENTS = {"odd": "tests.integration.test_unstorable_text:OddTextAgent"}


class OddTextAgent:
    """Emits, checkpoints, fails with and returns strings jsonb would refuse."""

    async def run(self, ctx: RunContext) -> dict[str, Any]:
        await ctx.emit("message.delta", {"text": "nul \x00 here"})
        await ctx.emit("message.delta", {"text": "half \ud83d"})  # the other half never comes
        await ctx.emit("tool.result", {"tool_call_id": "t", "output": {"k\x00ey": ["\udfff"]}, "is_error": False})
        await ctx.emit("tool.score", {"nan": float("nan"), "inf": [float("-inf")], "x": 1.5})
        await ctx.checkpoint({"seen": "x\x00"})
        if ctx.attempt == 1:
            raise RetryableError("the model said \x00 and \ud800")
        return {"text": "end \ud800"}


async def test_unstorable_characters_are_stored_as_replacement_characters(database_url: str, queue: Queue) -> None:
    run = await enqueue_demo(queue, agent="odd")
    async with in_process_worker(database_url, agents=AGENTS):
        finished = await wait_finished(queue, run.id)
    events = await queue.read_events(run.id)
    check_event_log(events)
    assert finished.status is Status.DONE, (finished.error_code, finished.error_message)
    assert finished.output == {"text": "end \ufffd"}
    texts = [e.data["text"] for e in events if e.type == "message.delta"]
    assert texts[:2] == ["nul \ufffd here", "half \ufffd"] or texts[0] == "nul \ufffd herehalf \ufffd"
    results = [e.data["output"] for e in events if e.type == "tool.result"]
    assert results == [{"k\ufffdey": ["\ufffd"]}] * 2
    assert [e.data for e in events if e.type == "tool.score"] == [{"nan": None, "inf": [None], "x": 1.5}] * 2
    retry = next(e for e in events if e.type == "run.retrying")
    assert retry.data["error_code"] == "retryable_error"


def test_only_what_cannot_be_stored_is_replaced() -> None:
    # Halves that meet again (coalesced deltas) make one character, as jsonb reads them.
    assert json.loads(_dumps({"t": "\ud83d" + "\ude00", "e": "😀", "n": "a\x00", "ok": "\\ud800"})) == {
        "t": "😀",
        "e": "😀",
        "n": "a\ufffd",
        "ok": "\\ud800",  # a backslash and letters, not a surrogate
    }
