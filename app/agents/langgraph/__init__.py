"""LangGraph graphs as runq agents (the ``runq[langgraph]`` extra, docs/agents.md):
:class:`LangGraphAgent` runs a ``StateGraph`` durably, checkpointed by :class:`RunqSaver`,
with the run's tenant's items in :class:`RunqStore`."""

from app.agents.langgraph.agent import LangGraphAgent
from app.agents.langgraph.saver import RunqSaver
from app.agents.langgraph.store import RunqStore

__all__ = ["LangGraphAgent", "RunqSaver", "RunqStore"]
