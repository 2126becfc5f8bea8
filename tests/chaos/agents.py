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


BAD_KINDS = ("tuple_key", "object", "oversize")
BAD_PLACES = ("event", "output", "checkpoint", "effect")


class BadDataAgent:
    """Streams a little, then hands runq a value it cannot store (``kind``) at ``place``: its
    run must end dead with invalid_data, and the runs beside it as if it were not there."""

    async def run(self, ctx: RunContext) -> dict[str, Any]:
        kind, place = ctx.input["kind"], ctx.input["place"]
        bad = {"tuple_key": {("x", 1): 2}, "object": {"o": object()}, "oversize": "x" * 9_000_000}[kind]
        await ctx.emit("message.delta", {"text": "about to "})
        await ctx.emit("tool.call", {"tool_call_id": "bad", "name": "bad", "arguments": {"place": place}})
        if place == "event":
            await ctx.emit("tool.result", {"tool_call_id": "bad", "name": "bad", "output": bad, "is_error": False})
        elif place == "checkpoint":
            await ctx.checkpoint({"bad": bad})
        elif place == "effect":

            async def value() -> Any:
                return bad

            await ctx.effect("bad", value)
        return {"bad": bad}
