"""LangGraph's assistants (DESIGN §17): each graph's default assistant (read-only: it is the
``langgraph.json``'s, not the database's) and a tenant's own (``POST /assistants``), versioned
in PostgreSQL (app/queue/graph_assistants.py). Answers as LangGraph's server does."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Response, status

from app.api.deps import Runtime, RuntimeDep
from app.api.problems import ApiProblem, problems
from app.api.protocols.langgraph.auth import Tenant
from app.api.protocols.langgraph.graphs import (
    Assistant,
    assistants,
    compiled,
    default_assistant,
    resolve,
    stored_assistant,
)
from app.api.protocols.langgraph.schemas import (
    AssistantCreate,
    AssistantLatest,
    AssistantPatch,
    AssistantSearchRequest,
    AssistantVersionsRequest,
)
from app.queue.graph_assistants import AssistantFields, StoredAssistant

router = APIRouter()
WRITES = problems(400, 401, 403, 404, 409, 413, 422, 503)


def stored_json(found: StoredAssistant, *, versioned: bool = False) -> dict[str, Any]:
    """An assistant as LangGraph's server shows it; a version of one (``versioned``) has no
    ``updated_at``."""
    shown: dict[str, Any] = {
        "assistant_id": str(found.assistant_id),
        "graph_id": found.graph_id,
        "config": found.config,
        "context": found.context,
        "metadata": found.metadata,
        "name": found.name,
        "description": found.description,
        "version": found.version,
        "created_at": found.created_at.isoformat(),
    }
    if not versioned:
        shown["updated_at"] = found.updated_at.isoformat()
    return shown


def _shown(found: Assistant | StoredAssistant) -> dict[str, Any]:
    return found.json() if isinstance(found, Assistant) else stored_json(found)


def _mirrored(config: dict[str, Any], context: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """``config.configurable`` and ``context`` kept one and the same, as LangGraph's server keeps
    them (``context`` replaces ``configurable`` since LangGraph 0.6); both given is a 400."""
    configurable = config.get("configurable")
    if configurable and context:
        raise ApiProblem(400, "config_and_context", "give either config.configurable or context, not both")
    if configurable:
        return config, dict(configurable)
    if context:
        return {**config, "configurable": context}, context
    return config, context


def _served(runtime: Runtime, graph_id: str | None) -> None:
    graphs = sorted(a.graph_id for a in assistants(runtime))
    if graph_id is not None and graph_id not in graphs:
        raise ApiProblem(404, "unknown_graph", f"no graph {graph_id!r}", graphs=graphs)


def _own(runtime: Runtime, assistant_id: str) -> uuid.UUID:
    """The id of an assistant of one's own to change: a default one is the ``langgraph.json``'s."""
    if default_assistant(runtime, assistant_id) is not None:
        raise ApiProblem(409, "default_assistant", "a graph's default assistant is not changed through the API")
    try:
        return uuid.UUID(assistant_id)
    except ValueError as exc:
        raise ApiProblem(404, "not_found", f"no assistant {assistant_id!r}") from exc


async def _matching(runtime: RuntimeDep, caller: Tenant, body: AssistantSearchRequest) -> list[dict[str, Any]]:
    """The tenant's own (newest first), then the default ones."""
    served = {a.graph_id for a in assistants(runtime)}
    own = await runtime.queue.search_assistants(
        tenant_id=caller.tenant_id, graph_id=body.graph_id, name=body.name, metadata=body.metadata
    )
    defaults = [
        a.json()
        for a in assistants(runtime)
        if (body.graph_id is None or a.graph_id == body.graph_id)
        and (body.name is None or body.name.lower() in a.graph_id.lower())
        and body.metadata.items() <= a.json()["metadata"].items()
    ]
    return [stored_json(a) for a in own if a.graph_id in served] + defaults


@router.post("/assistants", responses=WRITES)
async def create_assistant(caller: Tenant, runtime: RuntimeDep, body: AssistantCreate) -> dict[str, Any]:
    """An assistant of one's own: its graph with its own ``config`` / ``context`` / ``metadata``."""
    _served(runtime, body.graph_id)
    config, context = _mirrored(body.config or {}, body.context)
    assistant_id = body.assistant_id or uuid.uuid4()
    fields = AssistantFields(
        graph_id=body.graph_id,
        name=body.name or "Untitled",
        description=body.description,
        config=config,
        context=context or {},
        metadata=body.metadata or {},
    )
    taken = default_assistant(runtime, str(assistant_id))
    created = None if taken else await runtime.queue.create_assistant(
        tenant_id=caller.tenant_id, assistant_id=assistant_id, fields=fields
    )
    if created is not None:
        return stored_json(created)
    if body.if_exists == "do_nothing":
        return _shown(taken or await resolve(runtime, caller.tenant_id, str(assistant_id)))
    raise ApiProblem(409, "assistant_exists", f"assistant {assistant_id} already exists")


@router.patch("/assistants/{assistant_id}", responses=WRITES)
async def patch_assistant(
    caller: Tenant, runtime: RuntimeDep, assistant_id: str, body: AssistantPatch
) -> dict[str, Any]:
    """A new version, made current: what the body leaves out stays, ``metadata`` is merged."""
    uid = _own(runtime, assistant_id)
    _served(runtime, body.graph_id)
    config, context = _mirrored(body.config or {}, body.context)
    fields = AssistantFields(
        graph_id=body.graph_id,
        name=body.name,
        description=body.description,
        config=config or None,
        context=context,
        metadata=body.metadata,
    )
    patched = await runtime.queue.patch_assistant(tenant_id=caller.tenant_id, assistant_id=uid, fields=fields)
    if patched is None:
        raise ApiProblem(404, "not_found", f"no assistant {assistant_id!r}")
    return stored_json(patched)


@router.delete("/assistants/{assistant_id}", status_code=status.HTTP_204_NO_CONTENT, response_class=Response,
               responses=WRITES)  # fmt: skip
async def delete_assistant(caller: Tenant, runtime: RuntimeDep, assistant_id: str) -> Response:
    """Every version of an assistant of one's own."""
    uid = _own(runtime, assistant_id)
    if not await runtime.queue.delete_assistant(tenant_id=caller.tenant_id, assistant_id=uid):
        raise ApiProblem(404, "not_found", f"no assistant {assistant_id!r}")
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/assistants/{assistant_id}/versions", responses=WRITES)
async def assistant_versions(
    caller: Tenant, runtime: RuntimeDep, assistant_id: str, body: AssistantVersionsRequest
) -> list[dict[str, Any]]:
    """The versions, newest first (a default assistant has its one)."""
    found = await resolve(runtime, caller.tenant_id, assistant_id)
    metadata = body.metadata or {}
    if isinstance(found, Assistant):
        shown = found.json()
        shown.pop("updated_at")
        matching = [shown] if metadata.items() <= shown["metadata"].items() else []
        return matching[body.offset : body.offset + body.limit]
    versions = await runtime.queue.assistant_versions(
        tenant_id=caller.tenant_id,
        assistant_id=found.assistant_id,
        metadata=metadata,
        limit=body.limit,
        offset=body.offset,
    )
    return [stored_json(v, versioned=True) for v in versions]


@router.post("/assistants/{assistant_id}/latest", responses=WRITES)
async def set_latest_version(
    caller: Tenant, runtime: RuntimeDep, assistant_id: str, body: AssistantLatest
) -> dict[str, Any]:
    """Make one of the versions the current one (a rollback, or forward again)."""
    uid = _own(runtime, assistant_id)
    if await stored_assistant(runtime, caller.tenant_id, assistant_id) is None:
        raise ApiProblem(404, "not_found", f"no assistant {assistant_id!r}")
    if not await runtime.queue.set_latest_assistant(tenant_id=caller.tenant_id, assistant_id=uid, version=body.version):
        raise ApiProblem(404, "unknown_version", f"assistant {assistant_id} has no version {body.version}")
    return _shown(await resolve(runtime, caller.tenant_id, assistant_id))


@router.post("/assistants/search")
async def search_assistants(
    caller: Tenant, runtime: RuntimeDep, body: AssistantSearchRequest
) -> list[dict[str, Any]]:
    matching = await _matching(runtime, caller, body)
    return matching[body.offset : body.offset + body.limit]


@router.post("/assistants/count")
async def count_assistants(caller: Tenant, runtime: RuntimeDep, body: AssistantSearchRequest) -> int:
    return len(await _matching(runtime, caller, body))


@router.get("/assistants/{assistant_id}")
async def get_assistant(caller: Tenant, runtime: RuntimeDep, assistant_id: str) -> dict[str, Any]:
    return _shown(await resolve(runtime, caller.tenant_id, assistant_id))


@router.get("/assistants/{assistant_id}/graph")
async def assistant_graph(
    caller: Tenant, runtime: RuntimeDep, assistant_id: str, xray: bool | int = False
) -> Any:
    graph = compiled(runtime, (await resolve(runtime, caller.tenant_id, assistant_id)).graph_id)
    return (await graph.aget_graph(xray=xray)).to_json()


@router.get("/assistants/{assistant_id}/schemas")
async def assistant_schemas(caller: Tenant, runtime: RuntimeDep, assistant_id: str) -> dict[str, Any]:
    found = await resolve(runtime, caller.tenant_id, assistant_id)
    graph = compiled(runtime, found.graph_id)
    return {
        "graph_id": found.graph_id,
        "input_schema": graph.get_input_jsonschema(),
        "output_schema": graph.get_output_jsonschema(),
        "state_schema": graph.get_input_jsonschema(),
        "config_schema": graph.get_config_jsonschema(),
        "context_schema": graph.get_context_jsonschema(),
    }


@router.get("/assistants/{assistant_id}/subgraphs")
async def assistant_subgraphs(caller: Tenant, runtime: RuntimeDep, assistant_id: str) -> dict[str, Any]:
    graph = compiled(runtime, (await resolve(runtime, caller.tenant_id, assistant_id)).graph_id)
    subgraphs: dict[str, Any] = {}
    async for namespace, subgraph in graph.aget_subgraphs():
        subgraphs[namespace] = {"input_schema": subgraph.get_input_jsonschema()}
    return subgraphs
