"""What the suite's cases share: a stream read whole and as frames, a run held running."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from langgraph_sdk.client import LangGraphClient

from tests.worker_support import wait_until

NAMESPACE = uuid.UUID("6ba7b821-9dad-11d1-80b4-00c04fd430c8")  # of the default assistants' ids
WITHIN_S = 30.0


def frames(parts: list[Any]) -> list[tuple[str, Any]]:
    """A stream as ``(event, data)``, ids and times aside."""
    return [(p.event, p.data) for p in parts if p.event != "metadata"]


async def collect(stream: Any) -> list[Any]:
    return [part async for part in stream]


async def gated_run(
    lg: LangGraphClient, thread_id: str, gate: Path, **fields: Any
) -> dict[str, Any]:
    """A run of the ``gated`` graph, once it is running (it waits for ``gate`` to exist)."""
    run = await lg.runs.create(
        thread_id, "gated", input={"gate": str(gate), "passed": False}, **fields
    )

    async def running() -> bool:
        return (await lg.runs.get(thread_id, run["run_id"]))["status"] == "running"

    await wait_until(running, within=WITHIN_S, what="the gated run running")
    return run
