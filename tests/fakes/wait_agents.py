"""Agents that wait (docs/waits.md), loaded by workers through ``RUNQ_AGENTS``."""

from __future__ import annotations

from typing import Any

from app.agents.base import RunContext


class ThreeWaits:
    """Waits three times under one name, checkpointing the values so far after each, so every
    resumed attempt starts after the waits it has passed: straight-line code over three waits."""

    async def run(self, ctx: RunContext) -> dict[str, Any]:
        values: list[Any] = list(ctx.resume_state or [])
        while len(values) < 3:
            values.append(await ctx.wait_for("step", payload={"n": len(values) + 1}))
            await ctx.checkpoint(values)
        return {"values": values}
