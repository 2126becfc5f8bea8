"""The built-in ``openai`` agent: a streaming chat-completions loop for any OpenAI-compatible API.

One turn: ``POST {base_url}/chat/completions`` with ``stream: true``; text deltas become
``message.delta`` events, tool-call deltas are assembled by ``index`` and run only once the turn's
stream has finished. The conversation, in the provider's own message format, is the checkpoint
(``{"messages": [...]}``), saved after a model turn that asked for tools and after every tool
result, so a retried attempt never repeats a finished turn or a finished call.

``approve_tools`` (docs/waits.md) gates calls of those tools on a person: before each, the run
waits (``ctx.wait_for("approval", ...)``) without holding the worker. The resumed attempt starts
from the checkpoint of the turn, finds the recorded decision, and runs an approved call through
the effect ledger, so neither the approval nor the tool is repeated by a later crash.

The HTTP client is shared: one pooled ``aiohttp.ClientSession`` per worker process, event loop and
base URL, created lazily by :func:`model_connections`, so runs reuse connections to the provider. It
has no connection cap of its own (the client's default of 100 silently queued a worker's 101st
stream): a run streams one turn at a time, so a worker holds at most one model connection per
run slot. ``RUNQ_OPENAI_MAX_CONNECTIONS`` sets a cap; a turn that has to wait for it is logged
and counted (``runq_model_pool_wait_seconds``), and one that waits longer than the pool timeout
is a transient model error, retried inside the run like a dropped connection.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from app import tracing
from app.agents.base import FatalError, RetryableError, RunContext, WaitTimedOut
from app.agents.chat_input import OpenAIInput, SystemChatInput
from app.agents.inputs import parse_input
from app.agents.model_client import (
    TransientModelError,
    http_error,
    model_connections,
    provider_message,
    sse_data,
)
from app.agents.tools import DEFAULT_TOOLS, Tool, ToolRegistry, ToolResult, invoke
from app.guards.redact import redact, redact_data
from app.settings import Settings, get_settings

log = logging.getLogger(__name__)

OPENAI_HOST = "://api.openai.com/"  # the one endpoint that always needs a key


@dataclass
class _Turn:
    text: str = ""
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finished: bool = False
    counted: bool = False  # the model call is in the run's usage (with tokens, if sent)

    def add(self, delta: Mapping[str, Any]) -> str:
        """Fold one chunk's delta in; return its new text."""
        for part in delta.get("tool_calls") or ():
            index = part.get("index")
            if not isinstance(index, int):
                index = self._index_without_one(part.get("id"))
            call = self.calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
            call["id"] = call["id"] or part.get("id") or ""
            function = part.get("function") or {}
            call["name"] += function.get("name") or ""
            call["arguments"] += function.get("arguments") or ""
        text = delta.get("content") or ""
        self.text += text
        return text

    def _index_without_one(self, call_id: str | None) -> int:
        """Some servers omit ``index``: an unseen id starts a new call, else the delta continues."""
        for index, call in self.calls.items():
            if call_id and call["id"] == call_id:
                return index
        return len(self.calls) if call_id or not self.calls else max(self.calls)

    def message(self, turn_number: int) -> dict[str, Any]:
        """The assistant message to append to the conversation."""
        message: dict[str, Any] = {"role": "assistant", "content": self.text or None}
        if self.calls:
            message["tool_calls"] = [
                {
                    "id": call["id"] or f"call_{turn_number}_{index}",
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"]},
                }
                for index, call in sorted(self.calls.items())
            ]
        return message


class OpenAIAgent:
    """Chat completions with streamed tool calls; ``tools`` is the registry runs choose from.

    Subclass to offer your own tools (``tools = ToolRegistry([SHELL, my_tool])``) or to tune the
    in-run retry of transient model errors (``retries`` more tries after the first, exponential
    backoff from ``backoff_s``, waits — ``Retry-After`` included — capped at ``max_wait_s``).
    """

    input_schema = OpenAIInput  # checked when a run is created (app/agents/inputs.py)
    tools: ToolRegistry = DEFAULT_TOOLS
    retries: int = 3
    backoff_s: float = 0.5
    max_wait_s: float = 30.0

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or get_settings()

    async def run(self, ctx: RunContext) -> dict[str, Any]:
        if not self.settings.openai_api_key and OPENAI_HOST in self.settings.openai_base_url:
            # Retrying cannot conjure a key; a keyless local endpoint (Ollama, vLLM) is fine.
            raise FatalError("RUNQ_OPENAI_API_KEY is not set", code="model_not_configured")
        spec = parse_input(OpenAIInput, ctx.input)
        base = _request_base(spec, self.settings)
        tools = self.tools.select(spec.tools or ())
        gated = _approve_tools(spec.approve_tools)
        if tools:
            base["tools"] = [tool.spec() for tool in tools.values()]
        messages = _resume(ctx.resume_state)
        if messages is None:
            messages, fresh = opening(ctx.input, ctx.thread.messages if ctx.thread else ())
            await _remember(ctx, fresh)
        while True:
            await self._finish_tool_calls(ctx, tools, messages, gated)
            ctx.raise_if_cancelled()
            ctx.count_turn()
            turn_number = _assistant_turns(messages) + 1
            turn = await self._model_turn(ctx, {**base, "messages": messages})
            await ctx.emit("message.completed", {"text": turn.text})
            if not turn.calls:
                await _remember(ctx, [{"role": "assistant", "content": turn.text}])
                return {"text": turn.text}
            await _append(ctx, messages, turn.message(turn_number))

    async def _finish_tool_calls(
        self,
        ctx: RunContext,
        tools: Mapping[str, Tool],
        messages: list[dict[str, Any]],
        gated: frozenset[str] | None,
    ) -> None:
        """Run the last assistant turn's calls that have no result yet (all of them, or those
        left when the previous attempt stopped), checkpointing after each result."""
        last = max(
            (i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=None
        )
        if last is None:
            return
        done = {m.get("tool_call_id") for m in messages[last + 1 :] if m.get("role") == "tool"}
        turn_number = _assistant_turns(messages[: last + 1])
        for call in messages[last].get("tool_calls") or ():
            if call["id"] in done:
                continue
            key = f"openai:{turn_number}:{call['id']}"
            needs_approval = gated is not None and (not gated or call["function"]["name"] in gated)
            denied = await approval(ctx, call) if needs_approval else None
            ctx.count_tool_call()  # after the wait: the resumed attempt comes back through it
            if denied is not None:
                await ctx.emit("tool.call", call_event(call))
                result = ToolResult(denied, is_error=True)
            else:
                result = await self._call(ctx, tools, call, effect_key=key, ledger=needs_approval)
            # Redacted here, not only on the way into the event log: the output also goes to
            # the provider and into the stored conversation.
            result = ToolResult(redact_data(result.output), result.is_error)
            await ctx.emit(
                "tool.result",
                {"tool_call_id": call["id"], "output": result.output, "is_error": result.is_error},
            )
            await _append(ctx, messages, {"role": "tool", "tool_call_id": call["id"], "content": _content(result)})

    async def _call(
        self,
        ctx: RunContext,
        tools: Mapping[str, Tool],
        call: Mapping[str, Any],
        *,
        effect_key: str,
        ledger: bool = False,
    ) -> ToolResult:
        name, raw = call["function"]["name"], call["function"]["arguments"]
        try:
            args = json.loads(raw or "{}")
        except json.JSONDecodeError as exc:
            await ctx.emit(
                "tool.call", {"tool_call_id": call["id"], "name": name, "arguments": raw}
            )
            return ToolResult(
                f"arguments are not valid JSON ({exc}); send a JSON object", is_error=True
            )
        await ctx.emit("tool.call", {"tool_call_id": call["id"], "name": name, "arguments": args})
        tool = tools.get(name)
        if tool is None:
            offered = ", ".join(tools) or "none"
            return ToolResult(f"no tool named {name!r} (offered: {offered})", is_error=True)
        if not isinstance(args, dict):
            return ToolResult("arguments must be a JSON object", is_error=True)
        return await invoke(tool, ctx, args, effect_key=effect_key, ledger=ledger)

    async def _model_turn(self, ctx: RunContext, body: dict[str, Any]) -> _Turn:
        """One model turn, retrying transient failures a bounded number of times."""
        tries = 0
        while True:
            try:
                return await self._stream(ctx, body)
            except TransientModelError as exc:
                tries += 1
                wait = exc.retry_after
                if wait is None:
                    wait = min(self.max_wait_s, self.backoff_s * 2 ** (tries - 1))
                if tries > self.retries or wait > self.max_wait_s:
                    # Hand over to the queue's backoff rather than hold the lease for longer.
                    raise RetryableError(
                        redact(f"model unavailable after {tries} tries: {exc}"),
                        code="model_unavailable",
                    ) from exc
                log.warning("model turn failed, trying again in %.1f s: %s", wait, redact(str(exc)))
                await asyncio.sleep(wait)

    async def _stream(self, ctx: RunContext, body: dict[str, Any]) -> _Turn:
        headers = {"Accept": "text/event-stream"}
        if self.settings.openai_api_key:
            headers["Authorization"] = f"Bearer {self.settings.openai_api_key}"
        connections = model_connections(
            self.settings.openai_base_url.rstrip("/") + "/", self.settings.openai_max_connections
        )
        turn = _Turn()
        try:
            # Leaving this block for any reason (a cancel or lost lease arrives as task
            # cancellation) closes the response, and with it the connection mid-stream.
            async with (
                _model_span(body["model"]) as span,
                connections.slot() as client,
                client.post("chat/completions", json=body, headers=headers) as response,
            ):
                if response.status != 200:
                    raise http_error(response.status, response.headers, await response.read())
                async for payload in sse_data(response):
                    if payload == b"[DONE]":
                        turn.finished = True
                        break
                    chunk = json.loads(payload.decode())  # from str: no encoding sniffed per chunk
                    if "error" in chunk:
                        raise TransientModelError(f"error in stream: {provider_message(chunk)}")
                    for choice in chunk.get("choices") or ():
                        text = turn.add(choice.get("delta") or {})
                        if text:
                            await ctx.emit("message.delta", {"text": text})
                        turn.finished = turn.finished or choice.get("finish_reason") is not None
                    if isinstance(chunk.get("usage"), dict) and not turn.counted:
                        # Inside the stream: past max_tokens this raises, and leaving the block
                        # closes the stream at once.
                        turn.counted = True
                        _record(ctx, span, chunk["usage"])
        except aiohttp.ClientError as exc:  # connection, read timeout, a truncated body
            raise TransientModelError(f"{type(exc).__name__}: {exc}") from exc
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise TransientModelError(f"malformed stream chunk: {exc}") from exc
        if not turn.finished:
            raise TransientModelError("stream ended before the turn finished")
        if not turn.counted:  # a model that sends no usage: a model call, no tokens
            turn.counted = True
            ctx.record_usage(model_calls=1)
        return turn


@asynccontextmanager
async def _model_span(model: str) -> AsyncIterator[tracing.Span]:
    """The model call's span (OpenTelemetry's gen_ai names), its HTTP request's span below it."""
    attributes = {"gen_ai.system": "openai", "gen_ai.operation.name": "chat", "gen_ai.request.model": model}
    with tracing.span("runq.model_call", attributes=attributes) as span:
        yield span


def _record(ctx: RunContext, span: tracing.Span, usage: Mapping[str, Any]) -> None:
    """One model call with the tokens of its usage chunk (chat completions' names)."""

    def tokens(name: str) -> int:
        value = usage.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0

    input_tokens, output_tokens = tokens("prompt_tokens"), tokens("completion_tokens")
    span.set_attributes({"gen_ai.usage.input_tokens": input_tokens, "gen_ai.usage.output_tokens": output_tokens})
    ctx.record_usage(input_tokens=input_tokens, output_tokens=output_tokens, model_calls=1)


def _request_base(spec: OpenAIInput, settings: Settings) -> dict[str, Any]:
    # include_usage: a last chunk (no choices) carries the turn's token counts
    body: dict[str, Any] = {
        "model": spec.model or settings.openai_model,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if spec.temperature is not None:
        body["temperature"] = spec.temperature
    return body


def _approve_tools(value: list[str] | str | None) -> frozenset[str] | None:
    """``approve_tools``: ``None`` (no approvals), or the gated names; empty means every tool ("*")."""
    if value is None:
        return None
    if value == "*":
        return frozenset()
    return frozenset(value) or None


def call_event(call: Mapping[str, Any]) -> dict[str, Any]:
    """``tool.call`` data, and the approval's payload: arguments parsed when they are JSON."""
    raw = call["function"]["arguments"]
    try:
        arguments: Any = json.loads(raw or "{}")
    except json.JSONDecodeError:
        arguments = raw
    return {"tool_call_id": call["id"], "name": call["function"]["name"], "arguments": arguments}


async def approval(ctx: RunContext, call: Mapping[str, Any]) -> str | None:
    """Wait for a person's decision on this call; ``None`` if approved, else the denial the
    model is shown. The run's checkpoint was taken after the turn (or the previous result), so
    the resumed attempt comes back here and finds the decision recorded."""
    try:
        decision = await ctx.wait_for(
            "approval", payload=call_event(call), timeout_s=ctx.input.get("approval_timeout_s")
        )
    except WaitTimedOut:
        return "denied: no decision before the approval timed out"
    if isinstance(decision, dict) and decision.get("approved") is True:
        return None
    note = decision.get("note") if isinstance(decision, dict) else None
    return f"denied: {note}" if isinstance(note, str) and note else "denied"


def opening(
    input: Mapping[str, Any], history: Sequence[Mapping[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The first request's messages (system, the thread's history, the new input) and the new
    input alone, which the thread stores."""
    chat = parse_input(SystemChatInput, input)
    system = [{"role": "system", "content": chat.system}] if chat.system is not None else []
    fresh = chat.opening_messages()
    return [*system, *(dict(m) for m in history), *fresh], fresh


async def _remember(ctx: RunContext, messages: Sequence[Mapping[str, Any]]) -> None:
    """In a thread, the turn's messages join its history with the next checkpoint (every call
    is followed by one) or with the final answer's ending; a resumed attempt has them stored."""
    if ctx.thread is not None:
        await ctx.add_messages(messages)


async def _append(ctx: RunContext, messages: list[dict[str, Any]], message: dict[str, Any]) -> None:
    """A call's turn or a result joins the conversation, the thread, and the checkpoint."""
    messages.append(message)
    await _remember(ctx, [message])
    await ctx.checkpoint({"messages": list(messages)})


def _resume(state: Any) -> list[dict[str, Any]] | None:
    if isinstance(state, dict) and isinstance(state.get("messages"), list) and state["messages"]:
        return list(state["messages"])
    return None


def _assistant_turns(messages: list[dict[str, Any]]) -> int:
    return sum(1 for m in messages if m.get("role") == "assistant")


def _content(result: ToolResult) -> str:
    """A tool message's content: chat completions has no error flag, so errors are wrapped."""
    if result.is_error:
        return json.dumps({"error": result.output})
    return result.output if isinstance(result.output, str) else json.dumps(result.output)
