"""The graphs the ``/langgraph`` routes serve: their default assistants (the ids LangGraph's
server gives them), each compiled with runq's saver to read and write a thread's state."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from app.agents.langgraph_config import GRAPHS_MODULE
from app.agents.registry import load_agent
from app.api.deps import Runtime
from app.api.problems import ApiProblem

# LangGraph's server derives each graph's default assistant id from this namespace.
ASSISTANT_NAMESPACE = uuid.UUID("6ba7b821-9dad-11d1-80b4-00c04fd430c8")


@dataclass(frozen=True, slots=True)
class Assistant:
    graph_id: str
    created_at: datetime

    @property
    def assistant_id(self) -> uuid.UUID:
        return uuid.uuid5(ASSISTANT_NAMESPACE, self.graph_id)

    def json(self) -> dict[str, Any]:
        at = self.created_at.isoformat()
        return {
            "assistant_id": str(self.assistant_id),
            "graph_id": self.graph_id,
            "config": {},
            "context": {},
            "metadata": {"created_by": "system"},
            "name": self.graph_id,
            "description": None,
            "version": 1,
            "created_at": at,
            "updated_at": at,
        }


def assistants(runtime: Runtime) -> list[Assistant]:
    """The default assistant of every graph of the ``langgraph.json``."""
    config = runtime.settings.langgraph_config
    if config is None:
        return []
    created_at = datetime.fromtimestamp(config.stat().st_mtime, UTC)
    prefix = f"{GRAPHS_MODULE}:"
    return [
        Assistant(name, created_at)
        for name, target in runtime.settings.agent_registry.items()
        if target.startswith(prefix)
    ]


def assistant(runtime: Runtime, assistant_id: str, *, status: int = 404) -> Assistant:
    """The assistant an id names (its uuid, or the graph id itself); otherwise 404, or the
    ``status`` the route answers for a bad body (a run's unknown assistant is a 422)."""
    for found in assistants(runtime):
        if assistant_id in (found.graph_id, str(found.assistant_id)):
            return found
    code = "not_found" if status == 404 else "unknown_assistant"
    graphs = sorted(a.graph_id for a in assistants(runtime))
    raise ApiProblem(status, code, f"no assistant {assistant_id!r}", graphs=graphs)


def compiled(runtime: Runtime, graph_id: str) -> Any:
    """The graph bound to an unfenced saver: outside a run, to read a thread's state or to
    write it (``update_state``) while no run of it is in flight."""
    from app.agents.langgraph.saver import RunqSaver
    from app.agents.langgraph.server import bind_graph

    agent_class = load_agent(runtime.settings.agent_registry[graph_id])
    saver = RunqSaver(runtime.engine, keep=runtime.settings.langgraph_keep_checkpoints)
    return bind_graph(agent_class.source, saver, {})  # type: ignore[attr-defined]
