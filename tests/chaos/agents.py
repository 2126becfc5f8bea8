"""Test agents loaded by real worker processes through ``RUNQ_AGENTS`` (cwd is the repo root)."""

from __future__ import annotations

import time
from typing import Any

from app.agents.base import RunContext


class BlockingAgent:
    """Blocks the worker's event loop with ``time.sleep(block_s)``, as careless agent code does."""

    async def run(self, ctx: RunContext) -> dict[str, Any]:
        block_s = float(ctx.input.get("block_s", 3.0))
        await ctx.emit(
            "tool.call",
            {"tool_call_id": "block", "name": "block", "arguments": {"seconds": block_s}},
        )
        time.sleep(block_s)  # noqa: ASYNC251 - the point of this agent
        await ctx.emit(
            "tool.result",
            {"tool_call_id": "block", "name": "block", "output": "woke", "is_error": False},
        )
        return {"blocked_s": block_s}
