"""LangGraph's ``BaseStore`` on runq's PostgreSQL, one tenant's items (§17).

runq compiles each graph with it, so ``get_store()`` in a node reads and writes the items of
the run's tenant, the same ones ``/langgraph/store`` serves; its puts and deletes are fenced by
the run's lease, as its checkpoints are, so a worker that lost the run writes nothing. Each
operation is one statement of :class:`~app.queue.graph_store.GraphStore`; a batch's operations
run in order, so a put then a get in one batch sees the put. ``query`` (semantic search) is accepted and ignored: runq keeps
no embeddings, as LangGraph's stores without an ``index`` do.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
)
from sqlalchemy.ext.asyncio import AsyncEngine

from app.queue.graph_checkpoints import Fence
from app.queue.graph_store import GraphStore, StoredItem


class RunqStore(BaseStore):
    """A tenant's LangGraph items; usable on its own (``compile(store=RunqStore(engine, tenant_id=...))``)."""

    supports_ttl = True

    def __init__(
        self, engine: AsyncEngine, *, tenant_id: str, fence: Fence | None = None, ttl: TTLConfig | None = None
    ) -> None:
        """``fence``: the run and lease every put and delete is conditioned on (``None``:
        unfenced); ``ttl``: LangGraph's TTL settings (``default_ttl`` in minutes, ``refresh_on_read``)."""
        self.tenant_id = tenant_id
        self.fence = fence
        self.ttl_config = ttl
        self._items = GraphStore(engine)
        self._loop = _running_loop()

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        self._loop = asyncio.get_running_loop()
        return [await self._one(op) for op in ops]

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """For a sync node, which LangGraph runs in a thread: the batch runs on the loop the
        store was made on (a connection of its engine cannot serve another loop)."""
        if self._loop is None or _running_loop() is self._loop:
            raise RuntimeError("RunqStore's sync methods run off its event loop, after one async use: use the a-methods")
        return asyncio.run_coroutine_threadsafe(self.abatch(ops), self._loop).result()

    async def _one(self, op: Op) -> Result:
        tenant_id = self.tenant_id
        match op:
            case GetOp(namespace=namespace, key=key, refresh_ttl=refresh):
                found = await self._items.get_store_item(tenant_id=tenant_id, namespace=namespace, key=key, refresh=refresh)
                return None if found is None else Item(**_fields(found))
            case SearchOp(namespace_prefix=prefix, filter=filter, limit=limit, offset=offset, refresh_ttl=refresh):
                found_items = await self._items.search_store_items(
                    tenant_id=tenant_id, prefix=prefix, filter=filter, limit=limit, offset=offset, refresh=refresh
                )
                return [SearchItem(**_fields(item)) for item in found_items]
            case PutOp(namespace=namespace, key=key, value=value, ttl=ttl):
                if value is None:  # LangGraph's delete
                    await self._items.delete_store_item(
                        tenant_id=tenant_id, namespace=namespace, key=key, fence=self.fence
                    )
                else:
                    await self._items.put_store_item(
                        tenant_id=tenant_id, namespace=namespace, key=key, value=value, ttl_minutes=ttl, fence=self.fence
                    )
                return None
            case ListNamespacesOp(match_conditions=conditions, max_depth=max_depth, limit=limit, offset=offset):
                paths = {c.match_type: c.path for c in conditions or ()}
                return await self._items.list_store_namespaces(
                    tenant_id=tenant_id,
                    prefix=paths.get("prefix", ()),
                    suffix=paths.get("suffix", ()),
                    max_depth=max_depth,
                    limit=limit,
                    offset=offset,
                )
        raise TypeError(f"unknown store operation {type(op).__name__}")


def _fields(item: StoredItem) -> dict[str, Any]:
    return {
        "namespace": item.namespace,
        "key": item.key,
        "value": item.value,
        "created_at": item.created_at,
        "updated_at": item.updated_at,
    }


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
