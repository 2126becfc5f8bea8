"""The graphs of the LangGraph server conformance suite, served alike by runq and by
LangGraph's own ``langgraph dev`` (this folder's ``langgraph.json``). They cover the three
shapes a ``langgraph.json`` entry may have: a compiled graph (``chat``, ``gated``, ``nested``,
``memory``), a ``StateGraph`` builder (``counter``) and a factory taking a config (``ask``);
``memory`` reads and writes the server's store with ``get_store()``; ``toned`` answers the
``tone`` its config carries (an assistant's own, or the run's).

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


def _chain(state: Any, *nodes: tuple[str, Any]) -> StateGraph[Any]:
    """A builder running ``nodes`` (name, function or subgraph) one after the other."""
    builder = StateGraph(state)
    previous = START
    for name, node in nodes:
        builder.add_node(name, node)
        builder.add_edge(previous, name)
        previous = name
    builder.add_edge(previous, END)
    return builder


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


chat = _chain(MessagesState, ("model", _model_node)).compile()


class Counter(TypedDict):
    count: int
    steps: Annotated[list[str], operator.add]


def _one(state: Counter) -> dict[str, Any]:
    get_stream_writer()({"at": "one", "count": state.get("count", 0)})
    return {"count": state.get("count", 0) + 1, "steps": ["one"]}


def _two(state: Counter) -> dict[str, Any]:
    return {"count": state["count"] * 10, "steps": ["two"]}


counter_builder = _chain(Counter, ("one", _one), ("two", _two))


class Ask(TypedDict):
    question: str
    answer: str


def _ask(state: Ask) -> dict[str, Any]:
    return {"answer": interrupt({"question": state["question"]})}


def make_ask(config: RunnableConfig) -> Any:
    """A factory: LangGraph's server calls it with the run's config."""
    return _chain(Ask, ("ask", _ask)).compile()


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


gated = _chain(Gate, ("wait", _wait_gate)).compile()


class Nested(TypedDict):
    path: Annotated[list[str], operator.add]


_inner = _chain(Nested, ("inner", lambda state: {"path": ["inner"]})).compile()
nested = _chain(Nested, ("child", _inner), ("after", lambda state: {"path": ["after"]})).compile()


def _boom(state: Nested) -> dict[str, Any]:
    raise ValueError("boom")


boom = _chain(Nested, ("boom", _boom)).compile()


class Visit(TypedDict):
    user: str
    visits: int


async def _count_visit(state: Visit) -> dict[str, Any]:
    store = get_store()  # the server's store: runq's RunqStore, the tenant's items
    seen = await store.aget(("visits",), state["user"])
    visits = (seen.value["visits"] if seen else 0) + 1
    await store.aput(("visits",), state["user"], {"visits": visits})
    return {"visits": visits}


memory = _chain(Visit, ("count", _count_visit)).compile()


class Tone(TypedDict):
    tone: str


def _tone(state: Tone, config: RunnableConfig) -> dict[str, Any]:
    # An assistant's config reaches the graph merged under the run's own (``POST /assistants``).
    return {"tone": config["configurable"].get("tone", "none")}


toned = _chain(Tone, ("tone", _tone)).compile()
