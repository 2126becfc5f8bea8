"""LangGraph graphs as runq agents (the ``runq[langgraph]`` extra, docs/agents.md):
:class:`LangGraphAgent` runs a ``StateGraph`` durably, checkpointed by :class:`RunqSaver`."""

from app.agents.langgraph.agent import LangGraphAgent
from app.agents.langgraph.saver import RunqSaver

__all__ = ["LangGraphAgent", "RunqSaver"]
