"""examples/own-agent/myagents.py through a real worker, imported from the current directory as
`make run` imports it: one tool call and result per number, then its output."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.domain import Status
from app.queue import NewRun, Queue
from tests.worker_support import check_event_log, in_process_worker, wait_finished

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "own-agent"


async def test_the_example_agent_runs_from_the_current_directory(
    database_url: str, queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(EXAMPLE)
    async with in_process_worker(database_url, agents={"counter": "myagents:Counter"}):
        run, _ = await queue.enqueue(NewRun(tenant_id="t1", agent="counter", input={"to": 3, "step_s": 0}, max_attempts=3))
        done = await wait_finished(queue, run.id)
    assert done.status is Status.DONE, done.error_message
    assert done.output == {"text": "counted to 3", "count": 3}
    events = await queue.read_events(run.id)
    check_event_log(events)
    assert [e.data["output"] for e in events if e.type == "tool.result"] == ["1", "2", "3"]
