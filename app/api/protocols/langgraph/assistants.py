"""LangGraph's assistants (DESIGN §17): each graph's default assistant, read-only."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from app.api.deps import RuntimeDep
from app.api.protocols.langgraph.auth import Tenant
from app.api.protocols.langgraph.graphs import assistant, assistants, compiled
from app.api.protocols.langgraph.schemas import AssistantSearchRequest

router = APIRouter()


def _matching(runtime: RuntimeDep, body: AssistantSearchRequest) -> list[dict[str, Any]]:
    found = [a.json() for a in assistants(runtime)]
    return [
        a
        for a in found
        if (body.graph_id is None or a["graph_id"] == body.graph_id)
        and (body.name is None or body.name in a["name"])
        and body.metadata.items() <= a["metadata"].items()
    ]


@router.post("/assistants/search")
async def search_assistants(
    caller: Tenant, runtime: RuntimeDep, body: AssistantSearchRequest
) -> list[dict[str, Any]]:
    matching = _matching(runtime, body)
    return matching[body.offset : body.offset + body.limit]


@router.post("/assistants/count")
async def count_assistants(
    caller: Tenant, runtime: RuntimeDep, body: AssistantSearchRequest
) -> int:
    return len(_matching(runtime, body))


@router.get("/assistants/{assistant_id}")
async def get_assistant(caller: Tenant, runtime: RuntimeDep, assistant_id: str) -> dict[str, Any]:
    return assistant(runtime, assistant_id).json()


@router.get("/assistants/{assistant_id}/graph")
async def assistant_graph(
    caller: Tenant, runtime: RuntimeDep, assistant_id: str, xray: bool | int = False
) -> Any:
    graph = compiled(runtime, assistant(runtime, assistant_id).graph_id)
    return (await graph.aget_graph(xray=xray)).to_json()


@router.get("/assistants/{assistant_id}/schemas")
async def assistant_schemas(
    caller: Tenant, runtime: RuntimeDep, assistant_id: str
) -> dict[str, Any]:
    found = assistant(runtime, assistant_id)
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
async def assistant_subgraphs(
    caller: Tenant, runtime: RuntimeDep, assistant_id: str
) -> dict[str, Any]:
    graph = compiled(runtime, assistant(runtime, assistant_id).graph_id)
    subgraphs: dict[str, Any] = {}
    async for namespace, subgraph in graph.aget_subgraphs():
        subgraphs[namespace] = {"input_schema": subgraph.get_input_jsonschema()}
    return subgraphs
