"""runq's LangGraph checkpoint saver: LangGraph's public ``BaseCheckpointSaver``, asynchronous,
on runq's database layer (asyncpg through the process's bounded SQLAlchemy pool, no second
driver), so it works behind PgBouncer in transaction mode like the rest of runq.

Inside a run (``fence`` given) every write is fenced by the attempt's lease like every worker
write (§1): once the lease is lost the statement writes nothing and :class:`LeaseLost` stops the
attempt, so a zombie never moves a graph's state. Each put keeps only the newest ``keep``
checkpoints of its thread and namespace. On its own (``compile(checkpointer=RunqSaver(engine))``)
it is a plain saver. Asynchronous only: use ``ainvoke``/``astream``. The SQL is in
``app/queue/sql/langgraph.sql``; checkpoints are stored whole in LangGraph's typed encoding, so
pruning is one DELETE. Graphs with LangGraph's beta ``DeltaChannel`` need every ancestor
checkpoint and must not be pruned (``keep=None``).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    SerializerProtocol,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from sqlalchemy.ext.asyncio import AsyncEngine

from app.queue.codec import dumps
from app.queue.graph_checkpoints import Fence, GraphCheckpoints, StoredCheckpoint

PRUNE_STRATEGIES = ("keep_latest", "delete")


class RunqSaver(BaseCheckpointSaver[int]):
    """Checkpoints and pending writes in runq's PostgreSQL (tables from runq's migrations)."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        keep: int | None = None,
        fence: Fence | None = None,
        serde: SerializerProtocol | None = None,
    ) -> None:
        """``keep``: the checkpoints kept per thread and namespace (``None``: all);
        ``fence``: the run and lease every write is conditioned on (``None``: unfenced)."""
        super().__init__(serde=serde)
        if keep is not None and keep < 1:
            raise ValueError("keep must be at least 1 (or None to keep every checkpoint)")
        self.keep = keep
        self.fence = fence
        self._store = GraphCheckpoints(engine)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        configurable = config["configurable"]
        stored = await self._store.get_checkpoint(
            thread_id=str(configurable["thread_id"]),
            checkpoint_ns=configurable.get("checkpoint_ns", ""),
            checkpoint_id=get_checkpoint_id(config),
        )
        return None if stored is None else self._tuple(stored)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        configurable = (config or {}).get("configurable") or {}
        thread_id = configurable.get("thread_id")
        rows = await self._store.list_checkpoints(
            thread_id=None if thread_id is None else str(thread_id),
            checkpoint_ns=configurable.get("checkpoint_ns"),
            checkpoint_id=configurable.get("checkpoint_id"),
            filter=None if not filter else dumps(filter),
            before=None if before is None else get_checkpoint_id(before),
            limit=limit,
        )
        for stored in rows:
            yield self._tuple(stored)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        configurable = config["configurable"]
        thread_id, checkpoint_ns = (
            str(configurable["thread_id"]),
            configurable.get("checkpoint_ns", ""),
        )
        type_, blob = self.serde.dumps_typed(checkpoint)
        await self._store.put_checkpoint(
            thread_id=thread_id,
            checkpoint_ns=checkpoint_ns,
            checkpoint_id=checkpoint["id"],
            parent_checkpoint_id=configurable.get("checkpoint_id"),
            type=type_,
            checkpoint=blob,
            metadata=dumps(get_serializable_checkpoint_metadata(config, metadata)),
            keep=self.keep,
            fence=self.fence,
        )
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": checkpoint_ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        configurable = config["configurable"]
        encoded = [
            (WRITES_IDX_MAP.get(channel, idx), channel, *self.serde.dumps_typed(value))
            for idx, (channel, value) in enumerate(writes)
        ]
        await self._store.put_writes(
            thread_id=str(configurable["thread_id"]),
            checkpoint_ns=configurable.get("checkpoint_ns", ""),
            checkpoint_id=configurable["checkpoint_id"],
            task_id=task_id,
            task_path=task_path,
            writes=encoded,
            # errors, interrupts and resumes replace an earlier write at their index
            replace=all(channel in WRITES_IDX_MAP for channel, _ in writes),
            fence=self.fence,
        )

    async def adelete_thread(self, thread_id: str) -> None:
        await self._store.delete_threads([str(thread_id)])

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints LangGraph's runs wrote (``run_id`` in their metadata)."""
        if run_ids:
            await self._store.delete_for_runs([str(r) for r in run_ids])

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._store.copy_thread(source=str(source_thread_id), target=str(target_thread_id))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: each namespace's newest checkpoint stays; ``delete``: none does."""
        if isinstance(thread_ids, str):
            raise TypeError("thread_ids must be a sequence of thread ids, not a str")
        if strategy not in PRUNE_STRATEGIES:
            raise ValueError(f"unknown prune strategy: {strategy!r}")
        if not thread_ids:
            return
        ids = [str(t) for t in thread_ids]
        if strategy == "delete":
            await self._store.delete_threads(ids)
        else:
            await self._store.keep_latest(ids)

    async def last_writer(self, thread_id: str) -> uuid.UUID | None:
        """The runq run whose lease fenced the thread's newest checkpoint (``None``: no
        checkpoint, or one written unfenced)."""
        stored = await self._store.get_checkpoint(
            thread_id=thread_id, checkpoint_ns="", checkpoint_id=None
        )
        return None if stored is None else stored.run_id

    def _tuple(self, stored: StoredCheckpoint) -> CheckpointTuple:
        def config(checkpoint_id: str) -> RunnableConfig:
            return {
                "configurable": {
                    "thread_id": stored.thread_id,
                    "checkpoint_ns": stored.checkpoint_ns,
                    "checkpoint_id": checkpoint_id,
                }
            }

        return CheckpointTuple(
            config=config(stored.checkpoint_id),
            checkpoint=self.serde.loads_typed((stored.type, stored.checkpoint)),
            metadata=stored.metadata,  # type: ignore[arg-type]
            parent_config=config(stored.parent_checkpoint_id)
            if stored.parent_checkpoint_id
            else None,
            pending_writes=[
                (w.task_id, w.channel, self.serde.loads_typed((w.type or "null", w.blob or b"")))
                for w in stored.writes
            ],
        )
