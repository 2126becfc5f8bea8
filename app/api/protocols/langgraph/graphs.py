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
from app.api.protocols.langgraph.schemas import RunCreate
from app.queue.graph_assistants import StoredAssistant

# LangGraph's server derives each graph's default assistant id from this namespace.
ASSISTANT_NAMESPACE = uuid.UUID("6ba7b821-9dad-11d1-80b4-00c04fd430c8")


@dataclass(frozen=True, slots=True)
class Assistant:
    graph_id: str
    created_at: datetime

    @property
    def assistant_id(self) -> uuid.UUID:
        return uuid.uuid5(ASSISTANT_NAMESPACE, self.graph_id)

    @property
    def config(self) -> dict[str, Any]:
        return {}

    @property
    def context(self) -> dict[str, Any]:
        return {}

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


def default_assistant(runtime: Runtime, assistant_id: str) -> Assistant | None:
    """The default assistant an id names (its uuid, or the graph id itself), if any."""
    for found in assistants(runtime):
        if assistant_id in (found.graph_id, str(found.assistant_id)):
            return found
    return None


def unknown_assistant(runtime: Runtime, assistant_id: str, status: int) -> ApiProblem:
    """A 404 on the assistant's own routes; the ``status`` a route answers for a bad body (a
    run's or a cron's unknown assistant is a 422)."""
    code = "not_found" if status == 404 else "unknown_assistant"
    graphs = sorted(a.graph_id for a in assistants(runtime))
    return ApiProblem(status, code, f"no assistant {assistant_id!r}", graphs=graphs)


async def resolve(runtime: Runtime, tenant_id: str, assistant_id: str, *, status: int = 404) -> Assistant | StoredAssistant:
    """A default assistant or one of the tenant's own; otherwise :func:`unknown_assistant`. One whose
    graph the ``langgraph.json`` no longer serves is unknown: nothing could run or draw it."""
    found = default_assistant(runtime, assistant_id)
    if found is not None:
        return found
    stored = await stored_assistant(runtime, tenant_id, assistant_id)
    if stored is None or stored.graph_id not in {a.graph_id for a in assistants(runtime)}:
        raise unknown_assistant(runtime, assistant_id, status)
    return stored


async def stored_assistant(runtime: Runtime, tenant_id: str, assistant_id: str) -> StoredAssistant | None:
    """The tenant's own assistant of that id (``None``: none, or no UUID)."""
    try:
        uid = uuid.UUID(assistant_id)
    except ValueError:
        return None
    return await runtime.queue.get_assistant(tenant_id=tenant_id, assistant_id=uid)


def compiled(runtime: Runtime, graph_id: str) -> Any:
    """The graph bound to an unfenced saver: outside a run, to read a thread's state or to
    write it (``update_state``) while no run of it is in flight."""
    from app.agents.langgraph.saver import RunqSaver
    from app.agents.langgraph.server import bind_graph

    agent_class = load_agent(runtime.settings.agent_registry[graph_id])
    saver = RunqSaver(runtime.engine, keep=runtime.settings.langgraph_keep_checkpoints)
    return bind_graph(agent_class.source, saver, {})  # type: ignore[attr-defined]


def merged(found: Assistant | StoredAssistant, run: RunCreate) -> dict[str, Any]:
    """A run's ``config`` and ``context`` over its assistant's: the run's keys win, its
    ``configurable`` merged key by key into the assistant's."""
    configurable = {**found.config.get("configurable", {}), **run.config.get("configurable", {})}
    config = {**found.config, **run.config}
    if configurable:
        config["configurable"] = configurable
    context = {**found.context, **(run.context or {})}
    return {"config": config, "context": context or run.context}
