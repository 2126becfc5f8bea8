"""A LangGraph ``StateGraph`` as a runq agent: compiled per attempt with runq's fenced saver.

LangGraph's unit of durability is the node: with ``durability="sync"`` every superstep's
checkpoint is committed before the next one starts, so a retried attempt resumes the graph from
its last checkpoint, invoked without input, and only the node that was running repeats. Whether
the input was already taken is read from the graph's own storage: the thread's newest checkpoint
was written under this run's lease (:meth:`RunqSaver.last_writer`). An ``interrupt()`` becomes
a §9 wait named ``interrupt``; the resumed attempt finds the value recorded and hands it back as
``Command(resume=...)``. runq's own checkpoint (``ctx.checkpoint``) holds only what the graph's
does not: where the run's messages start in the graph state and how many the thread has stored,
so thread messages are added once (with a wait's checkpoint or with the ending); it is also
written after each node that called a model or a tool, so the run's usage, from which its
budgets are counted, is stored with the step that spent it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from dataclasses import asdict, dataclass, is_dataclass
from typing import Any, ClassVar, Literal

from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ToolMessage,
    convert_to_openai_messages,
)
from langchain_core.outputs import LLMResult
from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph, StateGraph
from langgraph.types import Command, Interrupt, StateSnapshot
from pydantic import BaseModel

from app.agents.base import FatalError, RunContext
from app.agents.chat_input import LangGraphInput
from app.agents.inputs import parse_input
from app.agents.langgraph.saver import RunqSaver
from app.agents.langgraph.store import RunqStore
from app.agents.langgraph_wire import wire_json
from app.queue.graph_checkpoints import Fence
from app.settings import Settings, get_settings

THREAD_MESSAGE_KEYS = ("role", "content", "tool_calls", "tool_call_id")

log = logging.getLogger(__name__)


class LangGraphAgent:
    """Subclass with ``graph = <a StateGraph>`` (not compiled: runq compiles it with its saver).

    Input ``{prompt}`` or ``{messages}`` (OpenAI chat format) becomes ``{"messages": [...]}``;
    ``{state: {...}}`` is the graph input as is. Output ``{text, state}``: the last AI message's
    text and the final state as JSON. ``interrupt_timeout_s`` in the input bounds each wait.
    """

    graph: ClassVar[StateGraph[Any]]
    input_schema: ClassVar[type[BaseModel] | None] = LangGraphInput  # None when graph_input reads another shape
    durability: ClassVar[Literal["sync", "async", "exit"]] = (
        "sync"  # a checkpoint committed before the next superstep
    )
    # An ``interrupt()`` makes the run wait (§9); False: the run ends there and a later run
    # resumes the thread with ``Command(resume=...)`` (LangGraph's server API, §17).
    waits_on_interrupt: ClassVar[bool] = True

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or get_settings()

    async def run(self, ctx: RunContext) -> dict[str, Any]:
        if ctx.lease is None:
            raise FatalError("a LangGraph agent runs in a worker (it needs the run's lease)")
        thread_id = str(ctx.thread.id if ctx.thread is not None else ctx.run_id)
        fence = Fence(ctx.lease.run_id, ctx.lease.lease_id)
        saver = RunqSaver(ctx.lease.engine, keep=self.settings.langgraph_keep_checkpoints, fence=fence)
        # runq's store for every kind of graph (a builder, a compiled graph, a factory's)
        store = RunqStore(ctx.lease.engine, tenant_id=ctx.tenant_id, fence=fence)
        graph = self.compiled(saver, ctx).copy(update={"store": store})
        saved = ctx.resume_state if isinstance(ctx.resume_state, dict) else {}
        progress = _Progress(
            base=int(saved.get("base", 0)), added=int(saved.get("added", 0)), tools=set(saved.get("tools", ()))
        )
        meter = _Meter(ctx, progress.tools)
        config = self.run_config(ctx, thread_id)
        config["callbacks"] = [meter]
        pending: Any
        start = config  # where the next stream starts; ``config``: the thread's latest checkpoint
        if await saver.last_writer(thread_id) != ctx.run_id:  # the input is not in the graph yet
            pending = self.graph_input(ctx.input)
            start = self.start_config(ctx, config)
            if ctx.thread is not None:
                progress.base = len(_messages((await graph.aget_state(start)).values))
                await ctx.checkpoint(progress.state())
        else:
            # A retried attempt goes on from the newest checkpoint, which is this run's (also
            # when the run forked the thread from an earlier one: the fork is the newest).
            interrupts = (await graph.aget_state(config)).interrupts
            pending = await self._answer(ctx, interrupts) if interrupts and self.waits_on_interrupt else None
        try:
            while True:
                await self._stream(ctx, graph, pending, start, meter, progress)
                start = config
                snapshot = await graph.aget_state(config)
                if not snapshot.interrupts or not self.waits_on_interrupt:
                    break
                # Checkpoint first (the waits passed and the thread's messages so far), so the
                # resumed attempt asks for this wait's occurrence, not the last one answered.
                await self._remember(ctx, snapshot.values, progress)
                await ctx.checkpoint(progress.state())
                pending = await self._answer(ctx, snapshot.interrupts)
        except asyncio.CancelledError:
            # Stopped (a Stop, a run that interrupts it): the thread keeps what the graph's
            # memory kept, so the two agree for the next run (a rollback removes both).
            with contextlib.suppress(Exception):
                await self._remember(ctx, (await graph.aget_state(config)).values, progress)
            raise
        await self._remember(ctx, snapshot.values, progress)
        return self.output(snapshot)

    def compiled(self, saver: RunqSaver, ctx: RunContext) -> CompiledStateGraph[Any]:
        """The graph compiled with the attempt's fenced saver."""
        return self.graph.compile(checkpointer=saver)

    def run_config(self, ctx: RunContext, thread_id: str) -> RunnableConfig:
        """The graph's config for the run: the LangGraph thread is runq's (or the run)."""
        return {"configurable": {"thread_id": thread_id}}

    def start_config(self, ctx: RunContext, config: RunnableConfig) -> RunnableConfig:
        """The config the run's input goes in with: ``config`` (the thread's latest checkpoint),
        or one naming an earlier checkpoint to fork the thread from."""
        return config

    def streams_events(self, ctx: RunContext) -> bool:
        """Whether LangChain's callback events (``astream_events`` v2) are stored too, each as a
        ``langgraph`` event ``{event: "events", data}`` (LangGraph's ``events`` stream mode)."""
        return False

    def stream_modes(self, ctx: RunContext) -> tuple[str, ...]:
        """LangGraph stream modes stored as ``langgraph`` events, ``{event, data}`` as
        LangGraph's server sends them (none for a runq agent: runq's own events say it)."""
        return ()

    def wire_frames(self, ctx: RunContext, mode: str, chunk: Any) -> list[tuple[str, Any]]:
        """The ``(event, data)`` frames one chunk of a stream mode makes."""
        return [(mode, wire_json(chunk))]

    def stream_options(self, ctx: RunContext) -> dict[str, Any]:
        """The arguments of ``astream`` besides the input, config and modes."""
        return {"durability": self.durability}

    def output(self, snapshot: StateSnapshot) -> dict[str, Any]:
        """The run's output from the final state."""
        return {"text": _last_ai_text(snapshot.values), "state": _jsonable(snapshot.values)}

    def graph_input(self, input: Mapping[str, Any]) -> Any:
        """The graph's input for a run's input; override for another state schema."""
        chat = parse_input(LangGraphInput, input)
        return chat.state if chat.state is not None else {"messages": chat.opening_messages()}

    async def _stream(
        self,
        ctx: RunContext,
        graph: CompiledStateGraph[Any],
        pending: Any,
        config: RunnableConfig,
        meter: _Meter,
        progress: _Progress,
    ) -> None:
        wire = self.stream_modes(ctx)
        modes: list[Any] = sorted({"messages", "debug", *wire})
        if self.streams_events(ctx):
            events = graph.astream_events(
                pending, config, version="v2", stream_mode=modes, **self.stream_options(ctx)
            )
            async with contextlib.aclosing(_parts_and_events(events)) as stream:
                await self._consume(ctx, stream, wire, meter, progress)
        else:
            parts = graph.astream(pending, config, stream_mode=modes, **self.stream_options(ctx))
            await self._consume(ctx, parts, wire, meter, progress)

    async def _consume(
        self,
        ctx: RunContext,
        stream: AsyncIterator[Any],
        wire: tuple[str, ...],
        meter: _Meter,
        progress: _Progress,
    ) -> None:
        """Store the stream's parts as events: the wire modes' frames, runq's own events."""
        part: Any  # (mode, chunk), or (namespace, mode, chunk) when subgraphs stream too
        async for part in stream:
            if isinstance(part, LangChainEvent):  # stored as sent: a resume replays it as is
                await ctx.emit("langgraph", {"event": "events", "data": wire_json(part.event)})
                continue
            namespace, mode, chunk = part if len(part) == 3 else ((), *part)
            if mode in wire:  # a subgraph's as LangGraph's server names it: "updates|child:<task>"
                for event, data in self.wire_frames(ctx, mode, chunk):
                    await ctx.emit("langgraph", {"event": "|".join((event, *namespace)), "data": data})
            if mode == "messages":
                message = chunk[0]
                if isinstance(message, AIMessageChunk) and message.text:
                    await ctx.emit("message.delta", {"text": message.text})
            elif mode == "debug" and not namespace and chunk.get("type") == "task_result":
                await _finished_node(ctx, chunk["step"], chunk["payload"])
                if meter.spent:  # its usage and turns stored with it: budgets bound the run
                    meter.spent = False
                    await ctx.checkpoint(progress.state())

    async def _answer(self, ctx: RunContext, interrupts: Sequence[Interrupt]) -> Command[Any]:
        """Wait for the value of the open interrupts (§9) and hand it back to the graph."""
        value = await ctx.wait_for(
            "interrupt",
            payload={"interrupts": [{"id": i.id, "value": _jsonable(i.value)} for i in interrupts]},
            timeout_s=ctx.input.get("interrupt_timeout_s"),
        )
        return Command(resume=value)

    async def _remember(self, ctx: RunContext, values: Any, progress: _Progress) -> None:
        """In a thread, the run's messages not stored yet join its history (OpenAI chat format)."""
        if ctx.thread is None:
            return
        new = _messages(values)[progress.base + progress.added :]
        if new:
            await ctx.add_messages([_thread_message(m) for m in convert_to_openai_messages(new)])
            progress.added += len(new)


@dataclass(frozen=True, slots=True)
class LangChainEvent:
    """One event of ``astream_events`` that is not a chunk of the graph's own stream."""

    event: Mapping[str, Any]


async def _parts_and_events(events: AsyncIterator[Any]) -> AsyncGenerator[Any]:
    """``astream_events``' events as ``astream``'s parts: the graph's own ``on_chain_stream``
    events carry them (the root run has no parent); every other event is a
    :class:`LangChainEvent`, but those LangChain hides from tracing, as LangGraph's server skips."""
    try:
        async for event in events:
            if event["event"] == "on_chain_stream" and not event.get("parent_ids"):
                yield event["data"]["chunk"]
            elif "langsmith:hidden" not in (event.get("tags") or ()):
                yield LangChainEvent(event)
    finally:  # closed at once when the run stops, in its own task
        if isinstance(events, AsyncGenerator):
            await events.aclose()


class _Progress:
    """Where this run's messages start in the graph's state, how many the thread has, and the
    tool calls whose use is counted already."""

    def __init__(self, *, base: int = 0, added: int = 0, tools: set[str]) -> None:
        self.base = base
        self.added = added
        self.tools = tools

    def state(self) -> dict[str, Any]:
        return {"base": self.base, "added": self.added, "tools": sorted(self.tools)}


class _Meter(AsyncCallbackHandler):
    """Budgets and usage from LangChain's callbacks: a model call counts a turn before it is
    made (past ``max_turns`` it fails), its tokens once it answered; a tool call counts once,
    by its id, also when it interrupted and runs again on the resumed attempt (``counted``
    is kept in the run's checkpoint with the wait)."""

    raise_error = True  # a passed budget fails the call instead of being logged

    def __init__(self, ctx: RunContext, counted: set[str]) -> None:
        self.ctx = ctx
        self.counted = counted
        self.spent = False  # a model or tool call since the run's last checkpoint

    async def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
        self.spent = True
        self.ctx.count_turn()

    async def on_llm_end(self, response: LLMResult, **kwargs: Any) -> None:
        input_tokens, output_tokens = _tokens(response)
        self.ctx.record_usage(input_tokens=input_tokens, output_tokens=output_tokens, model_calls=1)

    async def on_tool_start(self, serialized: Any, input_str: str, **kwargs: Any) -> None:
        self.spent = True
        call_id = kwargs.get("tool_call_id")
        if call_id is None or call_id not in self.counted:
            self.ctx.count_tool_call()
        if call_id is not None:
            self.counted.add(call_id)


def _tokens(response: LLMResult) -> tuple[int, int]:
    """A model call's tokens: its messages' ``usage_metadata``, else the provider's
    ``token_usage`` (an unstreamed call of a model that fills only that). A streamed
    ``ChatOpenAI`` reports usage only with ``stream_usage=True`` against other endpoints than
    OpenAI's; without it there is none to read, and that is logged once."""
    found = [
        metadata
        for generations in response.generations
        for generation in generations
        if (metadata := getattr(getattr(generation, "message", None), "usage_metadata", None))
    ]
    if found:
        return sum(int(m.get("input_tokens") or 0) for m in found), sum(int(m.get("output_tokens") or 0) for m in found)
    provider = (response.llm_output or {}).get("token_usage") or {}
    if provider:
        return int(provider.get("prompt_tokens") or 0), int(provider.get("completion_tokens") or 0)
    global _warned_no_usage
    if not _warned_no_usage:
        _warned_no_usage = True
        log.warning("a LangGraph model call reported no token usage; with ChatOpenAI, pass stream_usage=True")
    return 0, 0


_warned_no_usage = False


async def _finished_node(ctx: RunContext, step: int, task: Mapping[str, Any]) -> None:
    """A node's events once it finished: its AI messages, their tool calls, its tool results,
    then ``graph.node``. A node that failed or interrupted has not finished."""
    if task.get("error") is not None or task.get("interrupts"):
        return
    for message in _messages_in(task.get("result")):
        if isinstance(message, AIMessage):
            if message.text:  # a message that only calls tools has no text to complete
                await ctx.emit("message.completed", {"text": message.text})
            for call in message.tool_calls:
                await ctx.emit(
                    "tool.call",
                    {"tool_call_id": call["id"], "name": call["name"], "arguments": call["args"]},
                )
        elif isinstance(message, ToolMessage):
            await ctx.emit(
                "tool.result",
                {
                    "tool_call_id": message.tool_call_id,
                    "name": message.name,
                    "output": _jsonable(message.content),
                    "is_error": message.status == "error",
                },
            )
    await ctx.emit("graph.node", {"node": task["name"], "step": step})


def _messages_in(result: Any) -> list[BaseMessage]:
    """The messages a node wrote, whatever the state keys they went to."""
    found: list[BaseMessage] = []
    for value in result.values() if isinstance(result, Mapping) else ():
        if isinstance(value, BaseMessage):
            found.append(value)
        elif isinstance(value, list | tuple):
            found.extend(v for v in value if isinstance(v, BaseMessage))
    return found


def _messages(values: Any) -> list[BaseMessage]:
    messages = values.get("messages") if isinstance(values, Mapping) else None
    return [m for m in messages or () if isinstance(m, BaseMessage)]


def _last_ai_text(values: Any) -> str:
    return next((m.text for m in reversed(_messages(values)) if isinstance(m, AIMessage)), "")


def _thread_message(message: Mapping[str, Any]) -> dict[str, Any]:
    return {k: message[k] for k in THREAD_MESSAGE_KEYS if k in message}


def _jsonable(value: Any) -> Any:
    """State as JSON: messages in OpenAI chat format, models and dataclasses as their fields."""
    if isinstance(value, BaseMessage):
        return convert_to_openai_messages(value)
    if isinstance(value, BaseModel):
        return _jsonable(value.model_dump(mode="json"))
    if is_dataclass(value) and not isinstance(value, type):
        return _jsonable(asdict(value))
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return json.loads(json.dumps(value, default=str))
