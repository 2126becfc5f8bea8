"""LangGraph's store in runq's database: the statements of ``sql/langgraph_store.sql``, typed.

Every call names its tenant: a graph's store and the ``/langgraph/store`` routes see only their
tenant's items. A graph's writes carry its run's :class:`~app.queue.graph_checkpoints.Fence`: a
worker that lost its lease writes no item, as it writes no checkpoint. Like
:mod:`app.queue.graph_checkpoints` it imports nothing of LangGraph, so the routes and the reaper
work without the extra installed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from app.queue.codec import dumps
from app.queue.graph_checkpoints import Fence, FencedWrites
from app.queue.statements import statement

GET_ITEM = statement("langgraph_store_get")
PUT_ITEM = statement("langgraph_store_put")
DELETE_ITEM = statement("langgraph_store_delete")
SEARCH_ITEMS = statement("langgraph_store_search")
LIST_NAMESPACES = statement("langgraph_store_namespaces")
SWEEP_ITEMS = statement("langgraph_store_sweep")

Op = Literal["eq", "ne", "gt", "gte", "lt", "lte"]
OPERATORS: frozenset[str] = frozenset(("eq", "ne", "gt", "gte", "lt", "lte"))


class FilterInvalid(ValueError):
    """A search filter names an operator LangGraph's stores do not have."""


@dataclass(frozen=True, slots=True)
class StoredItem:
    """One live item as stored."""

    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    created_at: datetime
    updated_at: datetime


def conditions(filter: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """LangGraph's filter (``{field: value}`` or ``{field: {"$op": value}}``) as the
    ``[{key, op, value}]`` the search statement checks; :class:`FilterInvalid` for an unknown op."""
    found: list[dict[str, Any]] = []
    for key, wanted in (filter or {}).items():
        if isinstance(wanted, Mapping) and wanted and all(str(k).startswith("$") for k in wanted):
            for op, value in wanted.items():
                if op[1:] not in OPERATORS:
                    raise FilterInvalid(f"unknown filter operator {op!r} (one of $eq, $ne, $gt, $gte, $lt, $lte)")
                found.append({"key": key, "op": op[1:], "value": value})
        else:
            found.append({"key": key, "op": "eq", "value": wanted})
    return found


class GraphStore(FencedWrites):
    """Each method is one statement on one connection of the engine's bounded pool."""

    async def get_store_item(
        self, *, tenant_id: str, namespace: Sequence[str], key: str, refresh: bool
    ) -> StoredItem | None:
        params = {"tenant_id": tenant_id, "namespace": list(namespace), "key": key, "refresh": refresh}
        async with self._statement() as conn:
            row = (await conn.execute(GET_ITEM, params)).first()
        return None if row is None else _item(row)

    async def put_store_item(
        self,
        *,
        tenant_id: str,
        namespace: Sequence[str],
        key: str,
        value: Mapping[str, Any],
        ttl_minutes: float | None,
        fence: Fence | None = None,
    ) -> None:
        """Store or replace the item; ``ttl_minutes`` ``None`` keeps it until deleted.
        :class:`LeaseLost` and nothing written when the fence no longer holds."""
        params = {
            "tenant_id": tenant_id,
            "namespace": list(namespace),
            "key": key,
            "value": dumps(value),
            "ttl_minutes": ttl_minutes,
        }
        await self._write_fenced(PUT_ITEM, params, fence)

    async def delete_store_item(
        self, *, tenant_id: str, namespace: Sequence[str], key: str, fence: Fence | None = None
    ) -> None:
        """Delete the item; :class:`LeaseLost` and nothing deleted when the fence no longer holds."""
        params = {"tenant_id": tenant_id, "namespace": list(namespace), "key": key}
        await self._write_fenced(DELETE_ITEM, params, fence)

    async def search_store_items(
        self,
        *,
        tenant_id: str,
        prefix: Sequence[str],
        filter: Mapping[str, Any] | None,
        limit: int,
        offset: int,
        refresh: bool,
    ) -> list[StoredItem]:
        """Live items under ``prefix`` meeting ``filter``, most recently changed first."""
        params = {
            "tenant_id": tenant_id,
            "prefix": list(prefix),
            "suffix": [],
            "conditions": dumps(conditions(filter)),
            "limit": limit,
            "offset": offset,
            "refresh": refresh,
        }
        async with self._statement() as conn:
            rows = (await conn.execute(SEARCH_ITEMS, params)).all()
        return [_item(row) for row in rows]

    async def list_store_namespaces(
        self,
        *,
        tenant_id: str,
        prefix: Sequence[str] = (),
        suffix: Sequence[str] = (),
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[tuple[str, ...]]:
        """The distinct namespaces of live items (``*`` matches any label), cut to ``max_depth``."""
        params = {
            "tenant_id": tenant_id,
            "prefix": list(prefix),
            "suffix": list(suffix),
            "max_depth": max_depth,
            "limit": limit,
            "offset": offset,
        }
        async with self._statement() as conn:
            rows = (await conn.execute(LIST_NAMESPACES, params)).all()
        return [tuple(row.namespace) for row in rows]

    async def sweep_expired_store_items(self, *, batch: int = 1000) -> int:
        """Delete up to ``batch`` expired items (the reaper pass); how many."""
        async with self._statement() as conn:
            return len((await conn.execute(SWEEP_ITEMS, {"batch": batch})).all())


def _item(row: Any) -> StoredItem:
    return StoredItem(
        namespace=tuple(row.namespace),
        key=row.key,
        value=row.value,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )
