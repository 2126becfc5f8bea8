"""LangGraph's assistants of one's own in runq's database: the statements of
``sql/langgraph_assistants.sql``, typed. Every call names its tenant; an assistant is a tenant's
only. Each version is a row, so a patch, a rollback (``set_latest``) and a delete are each one
statement and the versions list is a plain read."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Row, TextClause
from sqlalchemy.exc import IntegrityError

from app.queue.codec import dumps
from app.queue.statements import statement
from app.queue.store import Store

CREATE = statement("langgraph_assistant_create")
GET = statement("langgraph_assistant_get")
SEARCH = statement("langgraph_assistant_search")
PATCH = statement("langgraph_assistant_patch")
VERSIONS = statement("langgraph_assistant_versions")
SET_LATEST = statement("langgraph_assistant_set_latest")
DELETE = statement("langgraph_assistant_delete")
# A patch or a rollback racing another on the same assistant: its statement saw the current
# version the other just retired (no row), or wrote beside it (a unique violation). Run again,
# it sees the other's version; a few tries outlast any burst of writers on one assistant.
TRIES = 5


@dataclass(frozen=True, slots=True)
class StoredAssistant:
    """One version of an assistant as stored (``created_at`` the assistant's first version's,
    ``updated_at`` this version's: the times LangGraph's server answers)."""

    assistant_id: uuid.UUID
    graph_id: str
    version: int
    name: str
    description: str | None
    config: dict[str, Any]
    context: dict[str, Any]
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class AssistantFields:
    """What a create or a patch writes; on a patch ``None`` keeps the current version's."""

    graph_id: str | None = None
    name: str | None = None
    description: str | None = None
    config: Mapping[str, Any] | None = None
    context: Mapping[str, Any] | None = None
    metadata: Mapping[str, Any] | None = None

    def params(self) -> dict[str, Any]:
        def json(value: Mapping[str, Any] | None) -> str | None:
            return None if value is None else dumps(value)

        return {
            "graph_id": self.graph_id,
            "name": self.name,
            "description": self.description,
            "config": json(self.config),
            "context": json(self.context),
            "metadata": json(self.metadata),
        }


class GraphAssistants(Store):
    """Each method is one statement on one connection of the engine's bounded pool."""

    async def create_assistant(
        self, *, tenant_id: str, assistant_id: uuid.UUID, fields: AssistantFields
    ) -> StoredAssistant | None:
        """Version 1 of a new assistant; ``None`` when the tenant has one with that id."""
        params = fields.params() | {"tenant_id": tenant_id, "assistant_id": assistant_id}
        async with self._statement() as conn:
            row = (await conn.execute(CREATE, params)).first()
        return None if row is None else _assistant(row)

    async def get_assistant(
        self, *, tenant_id: str, assistant_id: uuid.UUID
    ) -> StoredAssistant | None:
        params = {"tenant_id": tenant_id, "assistant_id": assistant_id}
        async with self._statement() as conn:
            row = (await conn.execute(GET, params)).first()
        return None if row is None else _assistant(row)

    async def search_assistants(
        self, *, tenant_id: str, graph_id: str | None, name: str | None, metadata: Mapping[str, Any]
    ) -> list[StoredAssistant]:
        """Every match, newest first: the route pages them together with the default assistants."""
        params = {
            "tenant_id": tenant_id,
            "graph_id": graph_id,
            "name": name,
            "metadata": dumps(metadata),
        }
        async with self._statement() as conn:
            rows = (await conn.execute(SEARCH, params)).all()
        return [_assistant(row) for row in rows]

    async def patch_assistant(
        self, *, tenant_id: str, assistant_id: uuid.UUID, fields: AssistantFields
    ) -> StoredAssistant | None:
        """A new current version; ``None`` for an unknown assistant."""
        params = fields.params() | {"tenant_id": tenant_id, "assistant_id": assistant_id}
        row = await self._changed(PATCH, params)
        return None if row is None else _assistant(row)

    async def assistant_versions(
        self,
        *,
        tenant_id: str,
        assistant_id: uuid.UUID,
        metadata: Mapping[str, Any],
        limit: int,
        offset: int,
    ) -> list[StoredAssistant]:
        params = {
            "tenant_id": tenant_id,
            "assistant_id": assistant_id,
            "metadata": dumps(metadata),
            "limit": limit,
            "offset": offset,
        }
        async with self._statement() as conn:
            rows = (await conn.execute(VERSIONS, params)).all()
        return [_assistant(row) for row in rows]

    async def set_latest_assistant(
        self, *, tenant_id: str, assistant_id: uuid.UUID, version: int
    ) -> bool:
        """Make ``version`` current; ``False`` when the assistant has no such version."""
        params = {"tenant_id": tenant_id, "assistant_id": assistant_id, "version": version}
        return await self._changed(SET_LATEST, params) is not None

    async def _changed(self, change: TextClause, params: dict[str, Any]) -> Row[Any] | None:
        """The change's row, run again while a concurrent change hid the current version."""
        for _ in range(TRIES - 1):
            try:
                async with self._statement() as conn:
                    row = (await conn.execute(change, params)).first()
            except IntegrityError:
                continue
            if row is not None or await self.get_assistant(**_named(params)) is None:
                return row
        async with self._statement() as conn:
            return (await conn.execute(change, params)).first()

    async def delete_assistant(self, *, tenant_id: str, assistant_id: uuid.UUID) -> bool:
        """Every version gone; ``False`` for an unknown assistant."""
        params = {"tenant_id": tenant_id, "assistant_id": assistant_id}
        async with self._statement() as conn:
            deleted = (await conn.execute(DELETE, params)).scalar_one()
        return bool(deleted)


def _named(params: dict[str, Any]) -> dict[str, Any]:
    return {"tenant_id": params["tenant_id"], "assistant_id": params["assistant_id"]}


def _assistant(row: Any) -> StoredAssistant:
    first_at = getattr(row, "first_at", None)
    return StoredAssistant(
        assistant_id=row.assistant_id,
        graph_id=row.graph_id,
        version=row.version,
        name=row.name,
        description=row.description,
        config=row.config,
        context=row.context,
        metadata=row.metadata,
        created_at=first_at or row.created_at,
        updated_at=row.updated_at,
    )
