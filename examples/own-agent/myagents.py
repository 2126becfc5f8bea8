"""A team's own agent, as runq runs it (docs/agents.md): counts to ``to``, one tool call and one
checkpoint per number, so a retried attempt goes on after the last number it checkpointed.

From the repository root, without PYTHONPATH:

    cp examples/own-agent/myagents.py .
    RUNQ_AGENTS=counter=myagents:Counter make run
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel, Field

from app.agents.base import RunContext


class CounterInput(BaseModel):
    """Checked when a run is created: `{"to": "ten"}` is a 422 `invalid_input`, nothing stored."""

    to: int = Field(default=3, ge=1, le=1000, description="how far to count")
    step_s: float = Field(default=0.5, ge=0, le=60, description="seconds per number")


class Counter:
    """Counts to `to`, one checkpoint per number."""

    input_schema = CounterInput

    async def run(self, ctx: RunContext) -> dict[str, Any]:
        args = CounterInput.model_validate(ctx.input)
        done = int(ctx.resume_state["n"]) if ctx.resume_state else 0  # a retried attempt resumes here
        for n in range(done + 1, args.to + 1):
            ctx.raise_if_cancelled()
            ctx.count_tool_call()  # counts against budget.max_tool_calls
            call = {"tool_call_id": f"count_{n}", "name": "count"}
            await ctx.emit("tool.call", call | {"arguments": {"n": n}})
            await asyncio.sleep(args.step_s)
            await ctx.emit("tool.result", call | {"output": str(n), "is_error": False})
            await ctx.checkpoint({"n": n})
        text = f"counted to {args.to}"
        await ctx.emit("message.completed", {"text": text})
        return {"text": text, "count": args.to}
