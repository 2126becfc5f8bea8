"""LangGraph's checkpoints in runq's database: the statements of ``sql/langgraph.sql``, typed.

Values arrive already encoded (LangGraph's serializer is the saver's business, in
``app/agents/langgraph/saver.py``), so this module imports nothing of LangGraph: it is part
of the queue's SQL layer whether the extra is installed or not. A write made for a runq
attempt carries a :class:`Fence` and changes nothing once its lease is lost
(:class:`~app.errors.LeaseLost`).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row, TextClause

from app.errors import LeaseLost
from app.queue.statements import statement
from app.queue.store import Store

PUT_CHECKPOINT_IF_LEASED = statement("langgraph_put_checkpoint_if_leased")
PUT_WRITES_IF_LEASED = statement("langgraph_put_writes_if_leased")
GET_CHECKPOINT = statement("langgraph_get_checkpoint")
GET_LATEST_CHECKPOINT = statement("langgraph_get_latest_checkpoint")
LIST_CHECKPOINTS = statement("langgraph_list_checkpoints")
DELETE_THREADS = statement("langgraph_delete_threads")
DELETE_FOR_RUNS = statement("langgraph_delete_for_runs")
KEEP_LATEST = statement("langgraph_keep_latest")
COPY_THREAD = statement("langgraph_copy_thread")


@dataclass(frozen=True, slots=True)
class Fence:
    """The claim a write is made under: the run and its lease (§1)."""

    run_id: uuid.UUID
    lease_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class StoredWrite:
    """One pending write as stored: the task, the channel and the encoded value."""

    task_id: str
    channel: str
    type: str | None
    blob: bytes | None


@dataclass(frozen=True, slots=True)
class StoredCheckpoint:
    """One checkpoint row as stored, with its pending writes in the order LangGraph applies them."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    type: str
    checkpoint: bytes
    metadata: dict[str, Any]
    run_id: uuid.UUID | None  # the runq run whose lease fenced it (null: the saver on its own)
    writes: list[StoredWrite]


class FencedWrites(Store):
    """LangGraph's writes made for a runq attempt (checkpoints, store items), fenced by its lease."""

    async def _write_fenced(self, write: TextClause, params: dict[str, Any], fence: Fence | None) -> Row[Any]:
        """Run one of the writes fenced by a run's lease (none without a fence: the saver on its
        own); :class:`LeaseLost` when the lease no longer holds, and then nothing was written."""
        run_id, lease_id = (fence.run_id, fence.lease_id) if fence else (None, None)
        fenced = params | {"run_id": run_id, "lease_id": lease_id}
        async with self._statement() as conn:
            row = (await conn.execute(write, fenced)).one()
        if not row.held:
            raise LeaseLost(str(run_id))
        return row


class GraphCheckpoints(FencedWrites):
    """Each method is one statement on one connection of the engine's bounded pool."""

    async def put_checkpoint(
        self,
        *,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        parent_checkpoint_id: str | None,
        type: str,
        checkpoint: bytes,
        metadata: str,
        keep: int | None,
        fence: Fence | None,
    ) -> int:
        """Store a checkpoint (``metadata`` as JSON text) and keep the newest ``keep``; the
        number pruned. :class:`LeaseLost` and nothing written when the fence no longer holds."""
        params = {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
            "parent_checkpoint_id": parent_checkpoint_id,
            "type": type,
            "checkpoint": checkpoint,
            "metadata": metadata,
            "keep": keep,
        }
        row = await self._write_fenced(PUT_CHECKPOINT_IF_LEASED, params, fence)
        return int(row.pruned)

    async def put_writes(
        self,
        *,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        task_id: str,
        task_path: str,
        writes: Sequence[tuple[int, str, str | None, bytes | None]],
        replace: bool,
        fence: Fence | None,
    ) -> None:
        """Store a task's writes ``(idx, channel, type, blob)``; ``replace`` overwrites the same
        indexes. :class:`LeaseLost` and nothing written when the fence no longer holds."""
        params = {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
            "task_id": task_id,
            "task_path": task_path,
            "idxs": [w[0] for w in writes],
            "channels": [w[1] for w in writes],
            "types": [w[2] for w in writes],
            "blobs": [w[3] for w in writes],
            "replace": replace,
        }
        await self._write_fenced(PUT_WRITES_IF_LEASED, params, fence)

    async def get_checkpoint(
        self, *, thread_id: str, checkpoint_ns: str, checkpoint_id: str | None
    ) -> StoredCheckpoint | None:
        """The checkpoint with that id, or the thread's newest in the namespace when ``None``."""
        params: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
        query = GET_LATEST_CHECKPOINT
        if checkpoint_id is not None:
            params["checkpoint_id"] = checkpoint_id
            query = GET_CHECKPOINT
        async with self._statement() as conn:
            row = (await conn.execute(query, params)).first()
        return (
            None if row is None else _stored(row, thread_id=thread_id, checkpoint_ns=checkpoint_ns)
        )

    async def list_checkpoints(
        self,
        *,
        thread_id: str | None,
        checkpoint_ns: str | None,
        checkpoint_id: str | None,
        filter: str | None,
        before: str | None,
        limit: int | None,
    ) -> list[StoredCheckpoint]:
        """Checkpoints newest first; each argument narrows only when given (``filter`` is a
        JSON object the metadata must contain)."""
        params = {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
            "filter": filter,
            "before": before,
            "limit": limit,
        }
        async with self._statement() as conn:
            rows = (await conn.execute(LIST_CHECKPOINTS, params)).all()
        return [
            _stored(row, thread_id=row.thread_id, checkpoint_ns=row.checkpoint_ns) for row in rows
        ]

    async def delete_threads(self, thread_ids: Sequence[str]) -> None:
        async with self._statement() as conn:
            await conn.execute(DELETE_THREADS, {"thread_ids": list(thread_ids)})

    async def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete what LangGraph runs wrote (the ``run_id`` in the checkpoints' metadata)."""
        async with self._statement() as conn:
            await conn.execute(DELETE_FOR_RUNS, {"run_ids": list(run_ids)})

    async def keep_latest(self, thread_ids: Sequence[str]) -> None:
        async with self._statement() as conn:
            await conn.execute(KEEP_LATEST, {"thread_ids": list(thread_ids)})

    async def copy_thread(self, *, source: str, target: str) -> None:
        async with self._statement() as conn:
            await conn.execute(COPY_THREAD, {"source": source, "target": target})




def _stored(row: Any, *, thread_id: str, checkpoint_ns: str) -> StoredCheckpoint:
    m = row._mapping
    writes = [
        StoredWrite(task_id, channel, type_, None if blob is None else bytes(blob))
        for task_id, channel, type_, blob in zip(
            m["task_ids"] or (),
            m["channels"] or (),
            m["types"] or (),
            m["blobs"] or (),
            strict=True,
        )
    ]
    return StoredCheckpoint(
        thread_id=thread_id,
        checkpoint_ns=checkpoint_ns,
        checkpoint_id=m["checkpoint_id"],
        parent_checkpoint_id=m["parent_checkpoint_id"],
        type=m["type"],
        checkpoint=bytes(m["checkpoint"]),
        metadata=m["metadata"],
        run_id=m.get("run_id"),
        writes=writes,
    )
