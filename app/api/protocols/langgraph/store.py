"""LangGraph's store routes (§17): ``PUT / GET / DELETE /store/items``, ``POST
/store/items/search``, ``POST /store/namespaces``, over the same items graphs reach with
``get_store()`` (app/agents/langgraph/store.py), the caller's tenant's only. A tenant key, never
a thread token: the store spans the tenant's threads. Answers as LangGraph's server does: a
missing item is ``200 null``, a put or delete ``204``."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Self

from fastapi import APIRouter, Query, Response, status
from pydantic import BaseModel, ConfigDict, Field

from app.api.deps import RuntimeDep
from app.api.problems import ApiProblem, problems
from app.api.protocols.langgraph.auth import Tenant
from app.api.schemas import NO_NUL, FiniteSeconds, Integral, StoredObject
from app.queue.graph_store import FilterInvalid, StoredItem

router = APIRouter(tags=["langgraph"])

# A label has no period: the GET route joins a namespace with them, as both SDKs do.
Label = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[^.\x00]+$")]
JOINED = r"^[^.\x00]+(\.[^.\x00]+)*$"  # a namespace in a query string
Namespace = Annotated[list[Label], Field(min_length=1, max_length=20)]
NamespacePattern = Annotated[list[Label], Field(max_length=20)]  # ``*`` matches any one label
Key = Annotated[str, Field(min_length=1, max_length=1000, pattern=NO_NUL)]
Page = Annotated[int, Field(ge=0, le=10_000), Integral]


class PutItem(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    namespace: Namespace
    key: Key
    value: StoredObject
    index: Any = Field(default=None, description="accepted; runq keeps no embeddings (`query` matches nothing more)")
    ttl: Annotated[FiniteSeconds, Field(gt=0, le=525_600 * 100)] | None = Field(
        default=None, description="minutes until it expires (null: never)"
    )


class DeleteItem(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    namespace: Namespace
    key: Key


class SearchItems(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    namespace_prefix: NamespacePattern = Field(default_factory=list)
    filter: StoredObject | None = Field(
        default=None, description='`{field: value}` or `{field: {"$eq|$ne|$gt|$gte|$lt|$lte": value}}`'
    )
    limit: Annotated[int, Field(ge=1, le=1000), Integral] = 10
    offset: Page = 0
    query: Annotated[str, Field(max_length=10_000)] | None = Field(
        default=None, description="accepted; without embeddings it does not rank"
    )
    refresh_ttl: bool | None = Field(default=None, description="restart the TTLs of the items found (default true)")


class ListNamespaces(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    prefix: NamespacePattern | None = None
    suffix: NamespacePattern | None = None
    max_depth: Annotated[int, Field(ge=1, le=20), Integral] | None = None
    limit: Annotated[int, Field(ge=1, le=1000), Integral] = 100
    offset: Page = 0


class ItemOut(BaseModel):
    namespace: list[str]
    key: str
    value: dict[str, Any]
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, item: StoredItem) -> Self:
        return cls.model_validate(item, from_attributes=True)


class SearchItemOut(ItemOut):
    score: float | None = Field(default=None, description="always null: runq keeps no embeddings")


class SearchOut(BaseModel):
    items: list[SearchItemOut]


class NamespacesOut(BaseModel):
    namespaces: list[list[str]]


@router.put("/store/items", status_code=status.HTTP_204_NO_CONTENT, response_class=Response,
            responses=problems(400, 401, 403, 413, 422, 503))  # fmt: skip
async def put_item(body: PutItem, principal: Tenant, runtime: RuntimeDep) -> Response:
    """Store or replace an item of the tenant; ``ttl`` in minutes."""
    await runtime.queue.put_store_item(
        tenant_id=principal.tenant_id, namespace=body.namespace, key=body.key, value=body.value, ttl_minutes=body.ttl
    )
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/store/items", response_model=ItemOut | None, responses=problems(400, 401, 403, 422, 503))
async def get_item(
    principal: Tenant,
    runtime: RuntimeDep,
    namespace: Annotated[str, Query(min_length=1, max_length=4000, pattern=JOINED, description="labels joined by periods")],
    key: Annotated[str, Query(min_length=1, max_length=1000, pattern=NO_NUL)],
    refresh_ttl: bool | None = None,
) -> ItemOut | None:
    """The item, or ``null`` (as LangGraph's server answers); its TTL restarts unless ``refresh_ttl=false``."""
    found = await runtime.queue.get_store_item(
        tenant_id=principal.tenant_id, namespace=namespace.split("."), key=key, refresh=refresh_ttl is not False
    )
    return None if found is None else ItemOut.of(found)


@router.delete("/store/items", status_code=status.HTTP_204_NO_CONTENT, response_class=Response,
               responses=problems(400, 401, 403, 413, 422, 503))  # fmt: skip
async def delete_item(body: DeleteItem, principal: Tenant, runtime: RuntimeDep) -> Response:
    """Delete an item of the tenant (``204`` whether or not it was there)."""
    await runtime.queue.delete_store_item(tenant_id=principal.tenant_id, namespace=body.namespace, key=body.key)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/store/items/search", response_model=SearchOut, responses=problems(400, 401, 403, 413, 422, 503))
async def search_items(body: SearchItems, principal: Tenant, runtime: RuntimeDep) -> SearchOut:
    """The tenant's items under a namespace prefix meeting the filter, most recently changed first."""
    try:
        found = await runtime.queue.search_store_items(
            tenant_id=principal.tenant_id,
            prefix=body.namespace_prefix,
            filter=body.filter,
            limit=body.limit,
            offset=body.offset,
            refresh=body.refresh_ttl is not False,
        )
    except FilterInvalid as exc:
        raise ApiProblem(422, "filter_invalid", str(exc)) from exc
    return SearchOut(items=[SearchItemOut.of(item) for item in found])


@router.post("/store/namespaces", response_model=NamespacesOut, responses=problems(400, 401, 403, 413, 422, 503))
async def list_namespaces(body: ListNamespaces, principal: Tenant, runtime: RuntimeDep) -> NamespacesOut:
    """The namespaces of the tenant's items matching ``prefix`` / ``suffix`` (``*``: any label),
    cut to ``max_depth`` labels."""
    found = await runtime.queue.list_store_namespaces(
        tenant_id=principal.tenant_id,
        prefix=body.prefix or (),
        suffix=body.suffix or (),
        max_depth=body.max_depth,
        limit=body.limit,
        offset=body.offset,
    )
    return NamespacesOut(namespaces=[list(ns) for ns in found])
