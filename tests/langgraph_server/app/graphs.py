"""The graphs of the LangGraph server conformance suite, served alike by runq and by
LangGraph's own ``langgraph dev`` (this folder's ``langgraph.json``). They cover the three
shapes a ``langgraph.json`` entry may have: a compiled graph (``chat``, ``gated``, ``nested``,
``memory``), a ``StateGraph`` builder (``counter``) and a factory taking a config (``ask``);
``memory`` reads and writes the server's store with ``get_store()``.

The model is ``ChatOpenAI`` pointed at the suite's fake OpenAI server
(``LANGGRAPH_TEST_MODEL_URL``, on 127.0.0.1); nothing reaches the network.
"""

from __future__ import annotations

import asyncio
import operator
import os
from pathlib import Path
from typing import Annotated, Any

from langchain_core.runnables import RunnableConfig
from langgraph.config import get_store, get_stream_writer
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import interrupt
from typing_extensions import TypedDict

GATE_POLL_S = 0.05
GATE_TIMEOUT_S = 60.0


async def _model_node(state: MessagesState) -> dict[str, Any]:
    from langchain_openai import ChatOpenAI

    model = ChatOpenAI(
        model="fake-model",
        base_url=os.environ["LANGGRAPH_TEST_MODEL_URL"],
        api_key="sk-test",  # type: ignore[arg-type]
        streaming=True,
        max_retries=0,
    )
    return {"messages": [await model.ainvoke(state["messages"])]}


_chat = StateGraph(MessagesState)
_chat.add_node("model", _model_node)
_chat.add_edge(START, "model")
_chat.add_edge("model", END)
chat = _chat.compile()


class Counter(TypedDict):
    count: int
    steps: Annotated[list[str], operator.add]


def _one(state: Counter) -> dict[str, Any]:
    get_stream_writer()({"at": "one", "count": state.get("count", 0)})
    return {"count": state.get("count", 0) + 1, "steps": ["one"]}


def _two(state: Counter) -> dict[str, Any]:
    return {"count": state["count"] * 10, "steps": ["two"]}


counter_builder = StateGraph(Counter)
counter_builder.add_node("one", _one)
counter_builder.add_node("two", _two)
counter_builder.add_edge(START, "one")
counter_builder.add_edge("one", "two")
counter_builder.add_edge("two", END)


class Ask(TypedDict):
    question: str
    answer: str


def _ask(state: Ask) -> dict[str, Any]:
    return {"answer": interrupt({"question": state["question"]})}


def make_ask(config: RunnableConfig) -> Any:
    """A factory: LangGraph's server calls it with the run's config."""
    builder = StateGraph(Ask)
    builder.add_node("ask", _ask)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", END)
    return builder.compile()


class Gate(TypedDict):
    gate: str  # a file; the node ends once it exists
    passed: bool


async def _wait_gate(state: Gate) -> dict[str, Any]:
    gate = Path(state["gate"])
    # The test is another process: a file is the one signal both servers' workers can see.
    async with asyncio.timeout(GATE_TIMEOUT_S):
        while not gate.exists():  # noqa: ASYNC110, ASYNC240 - one stat per poll
            await asyncio.sleep(GATE_POLL_S)
    return {"passed": True}


_gated = StateGraph(Gate)
_gated.add_node("wait", _wait_gate)
_gated.add_edge(START, "wait")
_gated.add_edge("wait", END)
gated = _gated.compile()


class Nested(TypedDict):
    path: Annotated[list[str], operator.add]


_inner = StateGraph(Nested)
_inner.add_node("inner", lambda state: {"path": ["inner"]})
_inner.add_edge(START, "inner")
_inner.add_edge("inner", END)

_nested = StateGraph(Nested)
_nested.add_node("child", _inner.compile())
_nested.add_node("after", lambda state: {"path": ["after"]})
_nested.add_edge(START, "child")
_nested.add_edge("child", "after")
_nested.add_edge("after", END)
nested = _nested.compile()


def _boom(state: Nested) -> dict[str, Any]:
    raise ValueError("boom")


_boom_graph = StateGraph(Nested)
_boom_graph.add_node("boom", _boom)
_boom_graph.add_edge(START, "boom")
_boom_graph.add_edge("boom", END)
boom = _boom_graph.compile()


class Visit(TypedDict):
    user: str
    visits: int


async def _count_visit(state: Visit) -> dict[str, Any]:
    store = get_store()  # the server's store: runq's RunqStore, the tenant's items
    seen = await store.aget(("visits",), state["user"])
    visits = (seen.value["visits"] if seen else 0) + 1
    await store.aput(("visits",), state["user"], {"visits": visits})
    return {"visits": visits}


_memory = StateGraph(Visit)
_memory.add_node("count", _count_visit)
_memory.add_edge(START, "count")
_memory.add_edge("count", END)
memory = _memory.compile()
