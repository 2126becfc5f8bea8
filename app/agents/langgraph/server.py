"""A graph of a ``langgraph.json`` as a runq agent, run the way LangGraph's server runs it
(DESIGN §17): the input, ``command``, config, context and interrupt points of the request;
the stream modes asked for stored as ``langgraph`` events; an ``interrupt()`` ends the run
(``success``, its thread ``interrupted``) and a later run's ``command: {resume}`` resumes it.

The graph may be compiled, a ``StateGraph`` builder, or a factory taking a config; each attempt
gets it bound to runq's fenced saver, whatever checkpointer it was compiled with."""

from __future__ import annotations

import inspect
from typing import Any, ClassVar

from langchain_core.messages import BaseMessageChunk, message_chunk_to_message
from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph, StateGraph
from langgraph.pregel import Pregel
from langgraph.types import Command, StateSnapshot

from app.agents.base import AgentError, FatalError, RunContext
from app.agents.langgraph.agent import LangGraphAgent
from app.agents.langgraph.saver import RunqSaver
from app.agents.langgraph_wire import STREAM_MODES, ServerRunInput, wire_json
from app.errors import QueueError
from app.settings import Settings

# The ``configurable`` keys that name a checkpoint rather than configure the graph.
CHECKPOINT_KEYS = ("checkpoint_id", "checkpoint_ns", "checkpoint_map")


class ServerGraphAgent(LangGraphAgent):
    """Subclassed per graph id by :func:`app.agents.langgraph.graphs.server_agent`."""

    graph_id: ClassVar[str]
    source: ClassVar[Any]  # the compiled graph, the builder or the factory
    input_schema = ServerRunInput
    waits_on_interrupt = False

    def __init__(self, settings: Settings | None = None) -> None:
        super().__init__(settings)
        self._messages: dict[str, Any] = {}  # the ``messages`` mode's messages so far, by id

    async def run(self, ctx: RunContext) -> dict[str, Any]:
        try:
            return await super().run(ctx)
        except (AgentError, QueueError):
            raise
        except Exception as exc:
            # LangGraph's server fails the run on a graph's exception, named by its class (a
            # node's RetryPolicy is how a graph retries); a run whose worker died still resumes.
            raise FatalError(str(exc), code=type(exc).__name__) from exc

    def compiled(self, saver: RunqSaver, ctx: RunContext | None = None) -> CompiledStateGraph[Any]:
        config = ServerRunInput.model_validate(ctx.input).config if ctx is not None else {}
        graph = bind_graph(self.source, saver, config)
        # LangGraph's server names a graph left unnamed by its graph id (the root run's name in
        # the ``events`` mode).
        if graph.name == "LangGraph":
            graph = graph.copy(update={"name": self.graph_id})
        return graph

    def streams_events(self, ctx: RunContext) -> bool:
        return "events" in ServerRunInput.model_validate(ctx.input).stream_mode

    def run_config(self, ctx: RunContext, thread_id: str) -> RunnableConfig:
        """The request's config on the thread's latest checkpoint: a checkpoint it names (in
        ``configurable``, as LangGraph's server also takes it) is only where the run starts."""
        config = ServerRunInput.model_validate(ctx.input).config
        configurable = {
            k: v for k, v in config.get("configurable", {}).items() if k not in CHECKPOINT_KEYS
        }
        run_config: RunnableConfig = {
            **config,  # type: ignore[typeddict-item]
            "configurable": {**configurable, "thread_id": thread_id},
        }
        if ctx.attempt == 1:  # the root run's id, as the reference gives it (a retry: a new one)
            run_config["run_id"] = ctx.run_id
        return run_config

    def start_config(self, ctx: RunContext, config: RunnableConfig) -> RunnableConfig:
        """The run's checkpoint (``checkpoint_id`` / ``checkpoint`` of the request, else one in
        its ``config.configurable``): the graph goes on from there, and what it writes is the
        thread's newest state, a fork of it (LangGraph's time travel)."""
        body = ServerRunInput.model_validate(ctx.input)
        given = body.config.get("configurable", {})
        start = {k: given[k] for k in CHECKPOINT_KEYS if given.get(k) is not None}
        start |= body.checkpoint or {}
        if not start.get("checkpoint_id"):
            return config
        return {**config, "configurable": {**config.get("configurable", {}), **start}}  # type: ignore[typeddict-item]

    def graph_input(self, input: Any) -> Any:
        body = ServerRunInput.model_validate(input)
        if body.command is not None:
            return Command(
                **{k: v for k, v in body.command.items() if k in ("resume", "update", "goto")}
            )
        return body.input

    def stream_modes(self, ctx: RunContext) -> tuple[str, ...]:
        asked = ServerRunInput.model_validate(ctx.input).stream_mode
        return tuple(dict.fromkeys(STREAM_MODES[m] for m in asked if m in STREAM_MODES))

    def wire_frames(self, ctx: RunContext, mode: str, chunk: Any) -> list[tuple[str, Any]]:
        """``messages-tuple`` sends each token as ``[chunk, metadata]``; ``messages`` (unless the
        tuple form is asked too, as on the reference) sends ``messages/metadata`` once per
        message, then the message so far as ``messages/partial`` (``messages/complete`` for a
        message that came whole)."""
        asked = ServerRunInput.model_validate(ctx.input).stream_mode
        if mode != "messages" or "messages-tuple" in asked:
            return super().wire_frames(ctx, mode, chunk)
        message, metadata = chunk
        frames: list[tuple[str, Any]] = []
        if message.id in self._messages:
            self._messages[message.id] += message
        else:
            self._messages[message.id] = message
            frames.append(("messages/metadata", {message.id: {"metadata": wire_json(metadata)}}))
        event = "messages/partial" if isinstance(message, BaseMessageChunk) else "messages/complete"
        frames.append((event, [wire_json(message_chunk_to_message(self._messages[message.id]))]))
        return frames

    def stream_options(self, ctx: RunContext) -> dict[str, Any]:
        body = ServerRunInput.model_validate(ctx.input)
        options: dict[str, Any] = {
            "durability": body.durability or self.durability,
            "interrupt_before": body.interrupt_before,
            "interrupt_after": body.interrupt_after,
            "subgraphs": body.stream_subgraphs,
        }
        if body.context is not None:
            options["context"] = body.context
        return options

    def output(self, snapshot: StateSnapshot) -> dict[str, Any]:
        """The final values, the nodes still to run and the open interrupts by task: what
        ``runs.wait`` and the thread show."""
        interrupts = {
            task.id: wire_json(list(task.interrupts)) for task in snapshot.tasks if task.interrupts
        }
        return {
            "values": wire_json(snapshot.values),
            "next": list(snapshot.next),
            "interrupts": interrupts,
        }


def bind_graph(
    source: Any, saver: RunqSaver | None, config: dict[str, Any]
) -> CompiledStateGraph[Any]:
    """``source`` compiled with ``saver``: a builder is compiled, a compiled graph gets the
    saver instead of its own, a factory is called with the run's config first."""
    if not isinstance(source, StateGraph | Pregel) and callable(source):
        takes_config = len(inspect.signature(source).parameters) > 0
        source = source(config) if takes_config else source()
        if inspect.isawaitable(source):
            raise TypeError(
                "an async graph factory is not supported; return the graph from a plain function"
            )
    if isinstance(source, StateGraph):
        return source.compile(checkpointer=saver)
    if isinstance(source, Pregel):
        return source.copy(update={"checkpointer": saver})  # type: ignore[return-value]
    raise TypeError(f"{source!r} is not a LangGraph graph, builder or factory")
