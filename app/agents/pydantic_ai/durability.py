"""runq as one more PydanticAI durable-execution engine, on pydantic-ai's public surface.

``pydantic_ai.durable_exec`` routes every model request and tool call of a run through a
``DurableOperationBackend``; an engine supplies only how one named durable unit runs
(``pydantic_ai/durable_exec/AGENTS.md``, "Building a new durable execution engine"). Here that
unit is a step of :class:`~app.agents.steps.Steps`, recorded in the run's effect
ledger, and running it live is also where the run's events, usage, budget and thread messages
come from, so a replayed step shows and counts nothing. Approvals come through the public
``handle_deferred_tool_calls`` hook, as §9 waits.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterable, Awaitable, Callable
from typing import Any

from pydantic import TypeAdapter
from pydantic_ai import DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied
from pydantic_ai.durable_exec import (
    JSON_CODEC,
    BaseDurabilityCapability,
    CallableOperationBackend,
    DurabilityEngineSpec,
    DurableOperationId,
    JournalOperationNamer,
    ModelRequestId,
    RoleBasedOperationConfig,
    ToolsetCallToolId,
)
from pydantic_ai.messages import (
    AgentStreamEvent,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
)
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.tools import RunContext as PydanticRunContext

from app.agents.base import RunContext
from app.agents.openai import approval, call_event
from app.agents.pydantic_ai.chat import request_messages, response_message
from app.agents.steps import Record, ReplayMismatch, Steps

# Stamped anew by every attempt, so no part of what a request means.
_VOLATILE = frozenset({"timestamp", "run_id", "conversation_id"})
_RESPONSE = TypeAdapter(ModelResponse)
STEP_PREFIX = "pydantic-ai"  # the ledger keys of runs in flight: never renamed


class RunqOperationBackend(CallableOperationBackend[None]):
    """Runs model requests and tool calls as recorded steps; everything else (tool-argument
    validation, event delivery, discovery) as it is, again on every attempt."""

    def __init__(self, durability: RunqDurability) -> None:
        config: RoleBasedOperationConfig[None] = RoleBasedOperationConfig(model=None, event=None, capability=None, tool=None)
        super().__init__(namer=JournalOperationNamer(durability.name or "agent"), config=config)
        self._durability = durability

    async def execute(
        self,
        *,
        operation_id: DurableOperationId,
        name: str,
        body: Callable[[], Awaitable[object]],
        cache_key: tuple[object, ...],
        config: None,
    ) -> object:
        if isinstance(operation_id, ModelRequestId):
            _, messages, _, parameters, _ = cache_key
            return await self._durability.model_step(messages, parameters, body)  # type: ignore[arg-type]
        if isinstance(operation_id, ToolsetCallToolId):
            tool_name, tool_args, ctx, _ = cache_key
            return await self._durability.tool_step(tool_name, tool_args, ctx, body)  # type: ignore[arg-type]
        return await body()


class RunqDurability(BaseDurabilityCapability[Any]):
    """The capability one run of a :class:`~app.agents.pydantic_ai.PydanticAIAgent` adds to its
    PydanticAI agent: built per run, around that run's context."""

    engine_spec = DurabilityEngineSpec(
        engine_name="runq",
        durable_unit_noun="step",
        durable_container_noun="run",
        codec=JSON_CODEC,  # records are JSON in the ledger
        wrapped_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        toolset_lifecycles={"function": "enter-always", "mcp": "enter-in-durable-unit", "dynamic": "enter-never"},
        journal_discovery=False,  # tool lists are the agent's code: looked up again, not recorded
    )

    def __init__(self, ctx: RunContext, *, name: str, opening: list[dict[str, Any]]) -> None:
        super().__init__(event_stream_handler=self._stream_text, name=name)
        self.ctx = ctx
        self.opening = opening  # the run's new input messages, which the thread stores
        self.steps = Steps(ctx, prefix=STEP_PREFIX)
        # pydantic-ai binds a shallow copy of the capability to the agent and calls its hooks
        # there, while the backend calls back the instance it was built with: what the steps'
        # positions count lives in one object both share.
        self.progress = _Progress()
        self._backend = RunqOperationBackend(self)

    @property
    def in_durable_context(self) -> bool:
        return True  # built only for a run under runq

    def get_durable_operation_backend(self) -> RunqOperationBackend:
        return self._backend

    def get_default_run_id(self) -> str | None:
        return str(self.ctx.run_id)  # the same on every attempt: requests replay alike

    # -- steps -------------------------------------------------------------------------------

    async def model_step(
        self, messages: list[ModelMessage], parameters: ModelRequestParameters, body: Callable[[], Awaitable[object]]
    ) -> object:
        position = self.progress.model_requests
        self.progress.model_requests += 1
        fingerprint = request_fingerprint(messages, parameters)

        async def live() -> Record:
            self.ctx.raise_if_cancelled()
            self.ctx.count_turn()
            await self._remember(_new_messages(messages) if position else self.opening)
            payload = await body()
            response = _RESPONSE.validate_python(payload)
            if response.text:
                await self.ctx.emit("message.completed", {"text": response.text})
            usage = response.usage
            self.ctx.record_usage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens, model_calls=1)
            return {"request": fingerprint, "response": payload}

        record = await self.steps.run(f"{position}:model", live)
        if record["request"] != fingerprint:
            raise ReplayMismatch(f"model request {position + 1} differs from the one an earlier attempt recorded")
        return record["response"]

    async def tool_step(
        self, tool_name: str, args: dict[str, Any], run_ctx: PydanticRunContext[Any], body: Callable[[], Awaitable[object]]
    ) -> object:
        call_id = run_ctx.tool_call_id or ""
        key = f"{self.progress.model_requests - 1}:tool:{call_id}" + (":approved" if run_ctx.tool_call_approved else "")

        async def live() -> Record:
            self.ctx.raise_if_cancelled()
            if call_id not in self.progress.announced:  # a tool that asked for approval is called twice
                self.ctx.count_tool_call()
                await self.ctx.emit("tool.call", {"tool_call_id": call_id, "name": tool_name, "arguments": args})
            payload = await body()
            if isinstance(payload, dict) and payload.get("kind") not in _DEFERRED:
                output, is_error = _tool_outcome(payload)
                await self.ctx.emit(
                    "tool.result", {"tool_call_id": call_id, "name": tool_name, "output": output, "is_error": is_error}
                )
            return {"tool": tool_name, "result": payload}

        record = await self.steps.run(key, live)
        self.progress.announced.add(call_id)
        if record["tool"] != tool_name:
            raise ReplayMismatch(f"tool call {call_id} was recorded for {record['tool']!r}, not {tool_name!r}")
        return record["result"]

    async def handle_deferred_tool_calls(
        self, ctx: PydanticRunContext[Any], *, requests: DeferredToolRequests
    ) -> DeferredToolResults | None:
        """Each call waiting for approval waits for a person (§9, name ``approval``); the
        decision is a step, so a later attempt never asks again."""
        if not requests.approvals:
            return None
        decisions: dict[str, bool | ToolApproved | ToolDenied] = {}
        for call in requests.approvals:
            chat_call = {"id": call.tool_call_id, "function": {"name": call.tool_name, "arguments": call.args_as_json_str()}}

            async def decide(chat_call: dict[str, Any] = chat_call) -> Record:
                denied = await approval(self.ctx, chat_call)
                if denied is not None:  # the model hears it as the call's result
                    self.ctx.count_tool_call()
                    await self.ctx.emit("tool.call", call_event(chat_call))
                    await self.ctx.emit(
                        "tool.result",
                        {"tool_call_id": chat_call["id"], "name": chat_call["function"]["name"], "output": denied, "is_error": True},
                    )
                return {"denied": denied}

            record = await self.steps.run(f"{self.progress.model_requests - 1}:approval:{call.tool_call_id}", decide)
            denied = record["denied"]
            decisions[call.tool_call_id] = True if denied is None else ToolDenied(denied)
            if denied is not None:
                self.progress.announced.add(call.tool_call_id)
        return DeferredToolResults(approvals=decisions)

    # -- live output -------------------------------------------------------------------------

    async def _stream_text(self, ctx: PydanticRunContext[Any], events: AsyncIterable[AgentStreamEvent]) -> None:
        """Inside a live model step only: the response's text as ``message.delta`` events."""
        async for event in events:
            text = ""
            if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
                text = event.part.content
            elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
                text = event.delta.content_delta
            if text:
                await self.ctx.emit("message.delta", {"text": text})

    async def _remember(self, messages: list[dict[str, Any]]) -> None:
        if self.ctx.thread is not None and messages:
            await self.ctx.add_messages(messages)


class _Progress:
    """Where the run is: the model requests so far in this attempt (the position of steps) and
    the tool calls whose ``tool.call`` the attempt emitted or replayed."""

    def __init__(self) -> None:
        self.model_requests = 0
        self.announced: set[str] = set()


_DEFERRED = frozenset({"approval_required", "call_deferred"})


def _tool_outcome(payload: dict[str, Any]) -> tuple[Any, bool]:
    """A recorded tool result as ``(output, is_error)`` for its ``tool.result`` event."""
    match payload.get("kind"):
        case "tool_return" | "tool_content_result":
            return payload.get("result"), False
        case "model_retry" | "tool_failed" | "run_cancelled":
            return payload.get("message"), True
        case "validation_error":
            return payload.get("errors"), True
    return payload, True


def _new_messages(messages: list[ModelMessage]) -> list[dict[str, Any]]:
    """The thread messages a model request adds: the previous response (with its tool calls)
    and what the request carries after it (tool results, retry prompts)."""
    last = max((i for i, m in enumerate(messages) if isinstance(m, ModelResponse)), default=None)
    if last is None:
        return []
    response = messages[last]
    assert isinstance(response, ModelResponse)
    chat = [response_message(response)]
    for message in messages[last + 1 :]:
        if isinstance(message, ModelRequest):
            chat += request_messages(message.parts)
    return chat


def request_fingerprint(messages: list[ModelMessage], parameters: ModelRequestParameters) -> str:
    """What a model request asks, as a digest to compare a replayed request with the recorded
    one (never a key: records are found by position). Only what it adds after the last response
    (its instructions, prompts and tool results), the length of the conversation and the tools:
    what came before was compared at the earlier steps, and hashing it all again made a long
    run's replay quadratic."""
    last = max((i for i, m in enumerate(messages) if isinstance(m, ModelResponse)), default=-1)
    tools = [*parameters.function_tools, *parameters.output_tools]
    request = {
        "length": len(messages),
        "new": _stable(ModelMessagesTypeAdapter.dump_python(messages[last + 1 :], mode="json")),
        "tools": [[tool.name, tool.parameters_json_schema] for tool in tools],
    }
    return hashlib.sha256(json.dumps(request, sort_keys=True, default=str).encode()).hexdigest()


def _stable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value
