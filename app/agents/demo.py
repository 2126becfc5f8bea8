"""The built-in ``demo`` agent (docs/contract.md, section 6): deterministic, no model.

It exercises every part of the runtime a real agent uses (streamed deltas, tool calls,
checkpoints and resume, the shell tool, the effect ledger, retryable and fatal failures), so
it is how users try runq and how the runtime is checked end to end.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.agents.base import MAX_WAIT_S, FatalError, RetryableError, RunContext, WaitTimedOut

DEFAULT_WAIT_TIMEOUT_S = 3600.0


class DemoInput(BaseModel):
    """The demo agent's input (docs/contract.md, section 6); other fields are accepted and ignored."""

    model_config = ConfigDict(extra="allow", frozen=True)

    prompt: str = ""
    steps: Annotated[int, Field(ge=0)] = 3
    step_s: Annotated[float, Field(ge=0)] = 0.2
    fail_attempts: int = 0
    fatal: bool = False
    shell: str | None = None
    effect: str | None = None
    wait: str | None = None
    wait_timeout_s: Annotated[float, Field(ge=0, le=MAX_WAIT_S)] = DEFAULT_WAIT_TIMEOUT_S

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> DemoInput:
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            raise FatalError(f"invalid demo input: {exc}", code="invalid_input") from exc


class DemoAgent:
    """Echo the prompt, sleep through ``steps`` tool calls, wait once if asked, then the optional
    shell and effect.

    Every checkpoint is taken after the prompt was streamed, so a resumed attempt (any
    ``resume_state``) skips it and continues after the last checkpointed step. In a thread it
    adds the prompt as the user's message (with a checkpoint before the first step) and, at the
    end, as the assistant's answer; its output counts the history it saw (``thread_messages``).
    """

    input_schema = DemoInput

    async def run(self, ctx: RunContext) -> dict[str, Any]:
        args = DemoInput.parse(ctx.input)
        done_steps = int(ctx.resume_state["step"]) if ctx.resume_state else 0

        if ctx.resume_state is None and args.prompt:
            ctx.count_turn()
            for word in re.split(r"(?<=\s)(?=\S)", args.prompt):
                await ctx.emit("message.delta", {"text": word})
            await ctx.emit("message.completed", {"text": args.prompt})

        if ctx.thread is not None and ctx.resume_state is None:
            # the user's message joins the thread with a checkpoint before the first step
            await ctx.add_messages([{"role": "user", "content": args.prompt}])
            await ctx.checkpoint({"step": 0})

        for step in range(done_steps + 1, args.steps + 1):
            ctx.count_tool_call()
            call_id = f"step_{step}"
            await ctx.emit(
                "tool.call",
                {"tool_call_id": call_id, "name": "sleep", "arguments": {"seconds": args.step_s}},
            )
            await asyncio.sleep(args.step_s)
            await ctx.emit(
                "tool.result",
                {
                    "tool_call_id": call_id,
                    "name": "sleep",
                    "output": f"step {step} of {args.steps} done",
                    "is_error": False,
                },
            )
            await ctx.checkpoint({"step": step})

        waited: dict[str, Any] = {}
        if args.wait:
            if ctx.resume_state is None and args.steps == 0:
                await ctx.checkpoint({"step": 0})  # the resumed attempt must not stream the prompt again
            try:
                waited["resumed_with"] = await ctx.wait_for(
                    args.wait, payload={"prompt": args.prompt}, timeout_s=args.wait_timeout_s
                )
            except WaitTimedOut:
                waited["timed_out"] = True

        if args.shell:
            ctx.count_tool_call()
            await ctx.emit(
                "tool.call",
                {"tool_call_id": "shell", "name": "shell", "arguments": {"command": args.shell}},
            )
            result = await ctx.shell(args.shell)
            await ctx.emit(
                "tool.result",
                {
                    "tool_call_id": "shell",
                    "name": "shell",
                    "output": result.output,
                    "exit_code": result.exit_code,
                    "timed_out": result.timed_out,
                    "is_error": result.exit_code != 0,
                },
            )

        if args.effect:
            ctx.count_tool_call()
            key = args.effect
            await ctx.emit(
                "tool.call", {"tool_call_id": "effect", "name": "effect", "arguments": {"key": key}}
            )
            performed = False

            async def perform() -> dict[str, Any]:
                nonlocal performed
                performed = True
                return {"key": key, "attempt": ctx.attempt}

            record = await ctx.effect(key, perform)
            await ctx.emit(
                "tool.result",
                {
                    "tool_call_id": "effect",
                    "name": "effect",
                    "output": record,
                    "replayed": not performed,
                    "is_error": False,
                },
            )

        if ctx.attempt <= args.fail_attempts:
            raise RetryableError(f"demo failure on attempt {ctx.attempt} of {args.fail_attempts}")
        if args.fatal:
            raise FatalError("demo fatal error")
        output: dict[str, Any] = {"text": args.prompt, "steps": args.steps, **waited}
        if ctx.thread is not None:
            await ctx.add_messages([{"role": "assistant", "content": args.prompt}])
            output["thread_messages"] = len(ctx.thread.messages)
        return output
