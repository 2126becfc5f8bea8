"""LangGraph graphs as runq agents for the tests (loaded by workers through ``RUNQ_AGENTS``).

The model is langchain-openai's ``ChatOpenAI`` pointed at the fake server of
``tests/fakes/openai_server.py`` (``RUNQ_OPENAI_BASE_URL``, read when a node calls it). Nodes
that must be counted across processes append a line to the file named by
``RUNQ_TEST_LANGGRAPH_LOG``; a node that must block until the test lets it go waits for the file
``<log>.go``.
"""

from __future__ import annotations

import asyncio
import operator
import os
from pathlib import Path
from typing import Annotated, Any

from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import interrupt

from app.agents.langgraph import LangGraphAgent


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _model() -> Any:
    from langchain_openai import ChatOpenAI  # when a node calls it: a slow import for the others

    return ChatOpenAI(
        model="fake-model",
        base_url=os.environ["RUNQ_OPENAI_BASE_URL"],
        api_key=os.environ.get("RUNQ_OPENAI_API_KEY", "sk-test"),  # type: ignore[arg-type]
        streaming=True,
        stream_usage=True,
        max_retries=0,
    )


async def model(state: MessagesState) -> dict[str, Any]:
    return {"messages": [await _model().bind_tools([add]).ainvoke(state["messages"])]}


tool_graph = StateGraph(MessagesState)
tool_graph.add_node("model", model)
tool_graph.add_node("tools", ToolNode([add]))
tool_graph.add_edge(START, "model")
tool_graph.add_conditional_edges("model", tools_condition)
tool_graph.add_edge("tools", "model")


class ToolGraph(LangGraphAgent):
    """A model with one tool, looping until it answers."""

    graph = tool_graph


@tool
def refund(order_id: str) -> str:
    """Refund an order, once a person said yes (``interrupt()`` inside the tool)."""
    decision = interrupt({"action": "refund", "order_id": order_id})
    return f"refunded {order_id}" if decision.get("approved") else "refund denied"


async def refund_model(state: MessagesState) -> dict[str, Any]:
    return {"messages": [await _model().bind_tools([refund]).ainvoke(state["messages"])]}


refund_graph = StateGraph(MessagesState)
refund_graph.add_node("model", refund_model)
refund_graph.add_node("tools", ToolNode([refund]))
refund_graph.add_edge(START, "model")
refund_graph.add_conditional_edges("model", tools_condition)
refund_graph.add_edge("tools", "model")


class RefundGraph(LangGraphAgent):
    """docs/agents.md's walkthrough: a tool that interrupts, so its node runs again on resume."""

    graph = refund_graph


BREAKS = {"left": 0}  # how many more times breaking_tools fails (the worker runs in the test's process)


async def breaking_tools(state: MessagesState) -> dict[str, Any]:
    if BREAKS["left"] > 0:
        BREAKS["left"] -= 1
        raise RuntimeError("the tools node breaks")
    return await ToolNode([add]).ainvoke(state)  # type: ignore[no-any-return]


breaking_graph = StateGraph(MessagesState)
breaking_graph.add_node("model", model)
breaking_graph.add_node("tools", breaking_tools)
breaking_graph.add_edge(START, "model")
breaking_graph.add_conditional_edges("model", tools_condition)
breaking_graph.add_edge("tools", "model")


class BreakingGraph(LangGraphAgent):
    """ToolGraph whose tools node fails ``BREAKS["left"]`` times, so its run is retried."""

    graph = breaking_graph


async def approve(state: MessagesState) -> dict[str, Any]:
    decision = interrupt({"question": "ship it?"})
    return {"messages": [AIMessage(f"decision: {decision}")]}


approval_graph = StateGraph(MessagesState)
approval_graph.add_node("approve", approve)
approval_graph.add_edge(START, "approve")
approval_graph.add_edge("approve", END)


class ApprovalGraph(LangGraphAgent):
    """One node that asks a person (``interrupt()``) and says what it was told."""

    graph = approval_graph


async def two_questions(state: MessagesState) -> dict[str, Any]:
    first = interrupt("first?")
    second = interrupt("second?")
    return {"messages": [AIMessage(f"{first} then {second}")]}


questions_graph = StateGraph(MessagesState)
questions_graph.add_node("ask", two_questions)
questions_graph.add_edge(START, "ask")
questions_graph.add_edge("ask", END)


class TwoQuestionsGraph(LangGraphAgent):
    """Two interrupts in one node, one after the other: two waits."""

    graph = questions_graph


async def count(state: MessagesState) -> dict[str, Any]:
    return {"messages": [AIMessage(f"I have seen {len(state['messages'])} messages")]}


counter_graph = StateGraph(MessagesState)
counter_graph.add_node("count", count)
counter_graph.add_edge(START, "count")
counter_graph.add_edge("count", END)


async def count_then_ask(state: MessagesState) -> dict[str, Any]:
    seen = len(state["messages"])
    decision = interrupt({"seen": seen})
    return {"messages": [AIMessage(f"I have seen {seen} messages; {decision}")]}


count_ask_graph = StateGraph(MessagesState)
count_ask_graph.add_node("ask", count_then_ask)
count_ask_graph.add_edge(START, "ask")
count_ask_graph.add_edge("ask", END)


class CountThenAskGraph(LangGraphAgent):
    """Asks a person, telling how many messages its memory holds (``{seen}``), then answers."""

    graph = count_ask_graph


class CounterGraph(LangGraphAgent):
    """Answers with the number of messages in its state: a thread's runs share it."""

    graph = counter_graph


class StepsState(MessagesState):
    steps: Annotated[list[str], operator.add]


def _log(line: str) -> bool:
    """Append ``line`` and this process's pid; whether the line was new to the log."""
    path = Path(os.environ["RUNQ_TEST_LANGGRAPH_LOG"])
    seen = path.exists() and any(
        entry.split(" ")[0] == line for entry in path.read_text().splitlines()
    )
    with path.open("a") as log:
        log.write(f"{line} {os.getpid()}\n")
    return not seen


def _gate_open() -> bool:
    return Path(os.environ["RUNQ_TEST_LANGGRAPH_LOG"]).with_suffix(".go").exists()


async def _blocked_the_first_time(name: str) -> None:
    """The first execution of ``name`` (in any process) waits for ``<log>.go``."""
    if _log(f"{name}-start"):
        while not _gate_open():  # noqa: ASYNC110 - the test opens the gate from another process
            await asyncio.sleep(0.05)


def _node(name: str, *, blocks: bool = False) -> Any:
    async def node(state: StepsState) -> dict[str, Any]:
        if blocks:
            await _blocked_the_first_time(name)
        _log(name)
        return {"steps": [f"{name}-by-{os.getpid()}"]}

    return node


three_graph = StateGraph(StepsState)
for index, name in enumerate(("one", "two", "three")):
    three_graph.add_node(name, _node(name, blocks=name == "three"))
    three_graph.add_edge(START if index == 0 else ("one", "two")[index - 1], name)
three_graph.add_edge("three", END)


class ThreeNodesGraph(LangGraphAgent):
    """one → two → three; the first execution of three blocks (the test kills its worker)."""

    graph = three_graph


zombie_graph = StateGraph(StepsState)
zombie_graph.add_node("one", _node("one"))
zombie_graph.add_node("two", _node("two", blocks=True))
zombie_graph.add_edge(START, "one")
zombie_graph.add_edge("one", "two")
zombie_graph.add_edge("two", END)


class ZombieGraph(LangGraphAgent):
    """one → two; the first execution of two blocks (the test stops its worker past its lease)."""

    graph = zombie_graph
