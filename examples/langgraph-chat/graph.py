"""The graph behind the page: a chat model, and a question the page answers first.

A message starting with ``/confirm`` makes the graph ask the person (``interrupt()``: the page
shows the question with Yes and No) before the model answers, knowing the decision. A plain
LangGraph graph: ``langgraph dev`` serves it as it is, and so does runq (``langgraph.json``).
The model is any OpenAI-compatible endpoint: ``OPENAI_BASE_URL``, ``OPENAI_API_KEY``,
``OPENAI_MODEL``.
"""

from __future__ import annotations

import os
from typing import Any

from langchain_core.messages import SystemMessage
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import interrupt

CONFIRM = "/confirm"


class State(MessagesState):
    decision: str | None


def ask(state: State) -> dict[str, Any]:
    asked = state["messages"][-1].text
    if not asked.startswith(CONFIRM):
        return {"decision": None}
    return {"decision": interrupt({"question": f"Go ahead with “{asked.removeprefix(CONFIRM).strip()}”?"})}


async def answer(state: State) -> dict[str, Any]:
    model = ChatOpenAI(model=os.environ.get("OPENAI_MODEL", "gpt-4o-mini"), streaming=True)
    told = [SystemMessage(f"The person answered: {state['decision']}")] if state.get("decision") else []
    return {"messages": [await model.ainvoke([*state["messages"], *told])]}


builder = StateGraph(State)
builder.add_node("ask", ask)
builder.add_node("answer", answer)
builder.add_edge(START, "ask")
builder.add_edge("ask", "answer")
builder.add_edge("answer", END)
graph = builder.compile()
