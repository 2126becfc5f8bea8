"""One run's durable steps: what the SDK asks of the wrapped models and tools, recorded.

Every model response, function-tool result, handoff and approval decision is a step of
:class:`~app.agents.steps.Steps`, found by its position: the number of the model request, and
for the others the id of the call that response made. Running a step live is also where its
events, usage and budget counters come from, so a replayed step shows and counts nothing: the
SDK's own usage totals add replayed responses again and are never read. Tokens stream to the
run's events while the live response streams; the SDK gets each response whole, live or
replayed alike.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from contextvars import ContextVar
from typing import Any, cast

from agents import Agent, FunctionTool, ItemHelpers, ToolApprovalItem, ToolErrorFormatterArgs
from agents.items import TResponseStreamEvent
from agents.run_config import ToolErrorFormatter
from agents.tool_context import ToolContext
from openai.types.responses import Response, ResponseCompletedEvent, ResponseFunctionToolCall
from pydantic_core import to_jsonable_python

from app.agents.base import RunContext
from app.agents.openai import approval, call_event
from app.agents.steps import Record, ReplayMismatch, Steps

STEP_PREFIX = "openai-agents"  # the ledger keys of runs in flight: never renamed
# Set while a tool step runs live: an agent used as a tool inherits the run's config, and its
# model requests are part of that step's result, not steps of their own.
_IN_TOOL_STEP: ContextVar[bool] = ContextVar("in_tool_step", default=False)
_FAILED = frozenset({"response.failed", "response.incomplete", "error", "response.error"})


class StreamFailed(Exception):
    """The model's stream ended in a failure event, or without a response: the event (if any)
    goes to the SDK, which raises its own error for it, as for a stream it ran itself."""

    def __init__(self, event: TResponseStreamEvent | None) -> None:
        super().__init__(getattr(event, "type", "no response"))
        self.event = event


class RunSteps:
    """The steps of one attempt of one run, shared by every wrapped model and tool of its
    agent graph, and the thread messages the run added that are not stored yet."""

    def __init__(self, ctx: RunContext, *, tool_error_formatter: ToolErrorFormatter | None = None) -> None:
        self.ctx = ctx
        self.unstored: list[dict[str, Any]] = []  # thread messages, filled by the run's session
        self.requests = 0  # model requests so far in this attempt: the position of steps
        self._steps = Steps(ctx, prefix=STEP_PREFIX)
        self._formatter = tool_error_formatter  # the team's, asked first
        self._failed: set[str] = set()  # calls whose tool raised, in this attempt

    async def step(self, key: str, live: Callable[[], Awaitable[Record]]) -> Record:
        """A step of the run. The thread messages added since the last one ride with its record
        when it runs live (one commit), and were stored with it when it is replayed. The SDK
        adds a turn's items between steps, never while one runs, so no message is added
        between the two."""

        async def live_with_messages() -> Record:
            record = await live()
            await self.store_messages()
            return record

        record = await self._steps.run(key, live_with_messages)
        self.unstored.clear()
        return record

    async def store_messages(self) -> None:
        """Hand the unstored thread messages to the run: they go with its next write."""
        if self.unstored:
            await self.ctx.add_messages(self.unstored)
            self.unstored.clear()

    # -- model responses ----------------------------------------------------------------------

    async def response(self, fingerprint: str, stream: Callable[[], AsyncIterator[TResponseStreamEvent]]) -> Response:
        """The response to the next model request: the recorded one, or ``stream()`` run live
        (its text deltas are the run's ``message.delta`` events as they arrive)."""
        position = self.requests  # counted once answered: a request the SDK retries keeps it

        async def live() -> Record:
            response = await self._streamed(stream)
            text = _text(response)
            if text:
                await self.ctx.emit("message.completed", {"text": text})
            usage = response.usage
            self.ctx.record_usage(
                input_tokens=usage.input_tokens if usage else 0,
                output_tokens=usage.output_tokens if usage else 0,
                model_calls=1,
            )
            # by alias: a field named apart from its key (``async_``) read back as an extra key
            # made the SDK refuse approvals of the replayed calls
            payload = response.model_dump(mode="json", by_alias=True, exclude_unset=True, warnings=False)
            return {"request": fingerprint, "response": payload}

        record = await self.step(f"{position}:model", live)
        self.requests += 1
        if record["request"] != fingerprint:
            raise ReplayMismatch(f"model request {position + 1} differs from the one an earlier attempt recorded")
        return Response.model_validate(record["response"])

    async def _streamed(self, stream: Callable[[], AsyncIterator[TResponseStreamEvent]]) -> Response:
        done: list[Any] = []  # output items, for a backend whose last event leaves them out
        # closed on the way out, a cancel's too: that closes the model's HTTP stream at once
        async with aclosing(cast(AsyncGenerator[TResponseStreamEvent], stream())) as events:
            async for event in events:
                kind = getattr(event, "type", None)
                if kind == "response.output_text.delta":
                    await self.ctx.emit("message.delta", {"text": event.delta})  # type: ignore[union-attr]
                elif kind == "response.output_item.done":
                    done.append(event.item)  # type: ignore[union-attr]
                elif isinstance(event, ResponseCompletedEvent):
                    response = event.response
                    if not response.output:
                        response.output = done
                    return response
                elif kind in _FAILED:
                    raise StreamFailed(event)
        raise StreamFailed(None)

    # -- tools, handoffs, approvals -----------------------------------------------------------

    async def tool_result(self, tool: FunctionTool, context: ToolContext[Any], arguments: str) -> Any:
        """What the tool returned for this call, recorded as the model will read it."""
        call_id = context.tool_call_id

        async def live() -> Record:
            self.ctx.count_tool_call()
            await self.ctx.emit("tool.call", {"tool_call_id": call_id, "name": tool.name, "arguments": _parsed(arguments)})
            token = _IN_TOOL_STEP.set(True)
            try:
                output = await tool.on_invoke_tool(context, arguments)
            finally:
                _IN_TOOL_STEP.reset(token)
            is_error = call_id in self._failed
            await self.ctx.emit(
                "tool.result",
                {"tool_call_id": call_id, "name": tool.name, "output": to_jsonable_python(output, fallback=str), "is_error": is_error},
            )
            return {"tool": tool.name, "output": _model_output(tool, context, output)}

        record = await self.step(f"{self.requests - 1}:tool:{call_id}", live)
        if record["tool"] != tool.name:
            raise ReplayMismatch(f"tool call {call_id} was recorded for {record['tool']!r}, not {tool.name!r}")
        return record["output"]

    async def format_tool_error(self, args: ToolErrorFormatterArgs[Any]) -> str | None:
        """``RunConfig.tool_error_formatter``: the SDK's one word that a function tool raised
        (its default failure handler turned the exception into the model's text)."""
        if args.kind == "tool_exception":
            self._failed.add(args.call_id)
        if self._formatter is None:
            return None
        message = self._formatter(args)
        return await message if inspect.isawaitable(message) else message

    async def handoff(self, source: Agent[Any], target: Agent[Any]) -> None:
        """``agent.handoff {from, to}``, once per handoff of the run."""

        async def live() -> Record:
            await self.ctx.emit("agent.handoff", {"from": source.name, "to": target.name})
            return {"to": target.name}

        record = await self.step(f"{self.requests - 1}:handoff", live)
        if record["to"] != target.name:
            raise ReplayMismatch(f"a handoff was recorded to {record['to']!r}, not {target.name!r}")

    async def decision(self, item: ToolApprovalItem) -> str | None:
        """A person's decision on a call that needs approval (§9, name ``approval``): ``None``
        to run it, else the denial the model reads. A step, so it is asked once per run."""
        raw = to_jsonable_python(item.raw_item)
        call = {"id": raw.get("call_id") or raw.get("id", ""), "function": {"name": item.tool_name or "", "arguments": raw.get("arguments") or "{}"}}

        async def live() -> Record:
            denied = await approval(self.ctx, call)
            if denied is not None:  # the model hears it as the call's result
                self.ctx.count_tool_call()
                await self.ctx.emit("tool.call", call_event(call))
                await self.ctx.emit(
                    "tool.result", {"tool_call_id": call["id"], "name": call["function"]["name"], "output": denied, "is_error": True}
                )
            return {"denied": denied}

        record = await self.step(f"{self.requests - 1}:approval:{call['id']}", live)
        denied: str | None = record["denied"]
        return denied


def inside_tool_step() -> bool:
    """Whether a tool step runs live here (a model request then belongs to it)."""
    return _IN_TOOL_STEP.get()


def _text(response: Response) -> str:
    """The response's text: its messages' ``output_text`` parts."""
    return "".join(
        part.text for item in response.output if item.type == "message" for part in item.content if part.type == "output_text"
    )


def _parsed(arguments: str) -> Any:
    try:
        return json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return arguments


def _model_output(tool: FunctionTool, context: ToolContext[Any], output: Any) -> Any:
    """The tool's output as the SDK hands it to the model, so a replayed result reads the same:
    a string as it is, a schema'd output as JSON (the SDK validates it again), anything else
    converted as the SDK converts it (``str()`` of an object, structured parts as parts)."""
    if isinstance(output, str):
        return output
    if tool.output_json_schema is not None:
        return to_jsonable_python(output)
    call = context.tool_call or ResponseFunctionToolCall(
        type="function_call", call_id=context.tool_call_id, name=tool.name, arguments=context.tool_arguments
    )
    return ItemHelpers.tool_call_output_item(call, output)["output"]
