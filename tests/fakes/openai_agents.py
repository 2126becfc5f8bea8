"""An ``openai`` agent with a side-effecting test tool, loaded by real worker processes through
``RUNQ_AGENTS=recording=tests.fakes.openai_agents:RecordingAgent``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from app.agents.base import RunContext
from app.agents.openai import OpenAIAgent
from app.agents.tools import SHELL, ToolRegistry

tools = ToolRegistry([SHELL])


@tools.tool(
    parameters={
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "note": {"type": "string"},
            "hang_on_attempt": {"type": "integer"},
        },
        "required": ["path", "note"],
    },
    side_effect=True,
)
async def record(ctx: RunContext, args: dict[str, Any]) -> dict[str, Any]:
    """Append a note to a file: a side effect a retried run must not repeat.

    With ``hang_on_attempt`` it first touches ``<path>.hanging`` and blocks on that attempt,
    so a test can kill the worker while the call is in flight.
    """
    path = Path(args["path"])
    if args.get("hang_on_attempt") == ctx.attempt:
        path.with_suffix(".hanging").touch()
        await asyncio.Event().wait()
    await asyncio.to_thread(_append, path, args["note"])
    return {"recorded": args["note"]}


def _append(path: Path, line: str) -> None:
    with path.open("a") as file:
        file.write(line + "\n")


class RecordingAgent(OpenAIAgent):
    tools = tools
    backoff_s = 0.05
