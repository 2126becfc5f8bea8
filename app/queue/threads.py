"""Threads (conversations): create, read, list, their history and runs, and what a new run of a
busy thread does to the runs in flight (the multitask strategies).

Every change to a thread's runs or messages from the API happens under the thread's row lock,
taken before any run's row, so concurrent creates on one thread queue up behind each other
(two ``reject`` creates on an idle thread make exactly one run) and the worker's fenced
statements, which lock a thread before its runs too, never deadlock with them.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain import Run, Status, Strategy, Thread, ThreadMessage
from app.errors import ChatIdTaken, IdempotencyConflict, ThreadBusy, ThreadNotFound
from app.queue.codec import dumps, events_params, message_from_row, page_params, thread_from_row
from app.queue.runs import REQUEST_CANCEL, NewRun, Runs
from app.queue.statements import statement

CREATE_THREAD = statement("create_thread")
GET_THREAD_BY_IDEMPOTENCY_KEY = statement("get_thread_by_idempotency_key")
GET_THREAD_BY_CHAT_ID = statement("get_thread_by_chat_id")
GET_THREAD = statement("get_thread")
LOCK_THREAD = statement("lock_thread")
LIST_THREADS = statement("list_threads")
INFLIGHT_THREAD_RUNS = statement("inflight_thread_runs")
THREAD_MESSAGES = statement("thread_messages")
THREAD_HISTORY = statement("thread_history")
LIST_THREAD_RUNS = statement("list_thread_runs")
ROLL_BACK_RUNS = statement("roll_back_runs")
DELETE_THREAD = statement("delete_thread")
CREATE_THREAD_WITH_ID = statement("create_thread_with_id")
MERGE_THREAD_METADATA = statement("merge_thread_metadata")
SEARCH_THREADS = statement("search_threads")

_NO_TURN = 2**63 - 1  # above every turn
# The cancel reason each strategy gives the runs it stops.
CANCEL_REASONS = {Strategy.INTERRUPT: "interrupted", Strategy.ROLLBACK: "rolled_back"}


class Threads(Runs):
    async def create_thread(
        self,
        *,
        tenant_id: str,
        metadata: Mapping[str, Any],
        idempotency_key: str | None = None,
        request_digest: str | None = None,
        chat_id: str | None = None,
    ) -> tuple[Thread, bool]:
        """A new thread; ``(thread, created)``, idempotent as :meth:`enqueue` is.
        :class:`ChatIdTaken` when another thread of the tenant has ``chat_id``."""
        params = {
            "tenant_id": tenant_id,
            "metadata": dumps(metadata),
            "idempotency_key": idempotency_key,
            "request_hash": request_digest,
            "chat_id": chat_id,
        }
        async with self._statement() as conn:
            row = (await conn.execute(CREATE_THREAD, params)).first()
            if row is not None:
                return thread_from_row(row), True
            existing = None
            if idempotency_key is not None:
                existing = (
                    await conn.execute(
                        GET_THREAD_BY_IDEMPOTENCY_KEY, {"tenant_id": tenant_id, "idempotency_key": idempotency_key}
                    )
                ).first()
        if existing is None:  # not the key: the chat id was taken
            raise ChatIdTaken(str(chat_id))
        if existing._mapping["request_hash"] != request_digest:
            raise IdempotencyConflict(idempotency_key)
        return thread_from_row(existing), False

    async def create_thread_with_id(
        self, thread_id: uuid.UUID, *, tenant_id: str, metadata: Mapping[str, Any]
    ) -> Thread | None:
        """A new thread with the id its client chose; None when a thread has that id."""
        params = {"thread_id": thread_id, "tenant_id": tenant_id, "metadata": dumps(metadata)}
        async with self._statement() as conn:
            row = (await conn.execute(CREATE_THREAD_WITH_ID, params)).first()
        return None if row is None else thread_from_row(row)

    async def merge_thread_metadata(
        self, thread_id: uuid.UUID, *, tenant_id: str, metadata: Mapping[str, Any]
    ) -> Thread:
        """The thread with ``metadata`` merged into its own; :class:`ThreadNotFound` otherwise."""
        params = {"thread_id": thread_id, "tenant_id": tenant_id, "metadata": dumps(metadata)}
        async with self._statement() as conn:
            row = (await conn.execute(MERGE_THREAD_METADATA, params)).first()
        if row is None:
            raise ThreadNotFound(str(thread_id))
        return thread_from_row(row)

    async def search_threads(
        self,
        *,
        tenant_id: str,
        metadata: Mapping[str, Any],
        limit: int,
        offset: int = 0,
        ids: Sequence[uuid.UUID] | None = None,
        sort_by: Literal["created_at", "updated_at", "thread_id"] = "created_at",
        descending: bool = True,
    ) -> list[Thread]:
        """The tenant's threads whose metadata contains ``metadata`` (of ``ids``, when given),
        ordered by ``sort_by`` then id (newest first by default)."""
        params = {
            "tenant_id": tenant_id,
            "metadata": dumps(metadata),
            "ids": None if ids is None else list(ids),
            "sort_by": sort_by,
            "descending": descending,
            "limit": limit,
            "offset": offset,
        }
        async with self._statement() as conn:
            rows = (await conn.execute(SEARCH_THREADS, params)).all()
        return [thread_from_row(r) for r in rows]

    async def thread_for_chat(self, *, tenant_id: str, chat_id: str) -> tuple[Thread, bool]:
        """The tenant's thread named ``chat_id``, created on first use; ``(thread, created)``."""
        params = {"tenant_id": tenant_id, "metadata": "{}", "idempotency_key": None, "request_hash": None}
        async with self._tx() as conn:
            row = (await conn.execute(CREATE_THREAD, params | {"chat_id": chat_id})).first()
            if row is not None:
                return thread_from_row(row), True
            # Read committed: this statement sees the row whose insert made ours do nothing.
            row = (await conn.execute(GET_THREAD_BY_CHAT_ID, {"tenant_id": tenant_id, "chat_id": chat_id})).first()
        if row is None:  # deleted between the two statements
            raise ThreadNotFound(chat_id)
        return thread_from_row(row), False

    async def named_thread(self, name: str, *, tenant_id: str, create: bool = False) -> Thread:
        """The tenant's thread a chat frontend names: its id, else its ``chat_id`` (created on
        first use when ``create``); :class:`ThreadNotFound` otherwise."""
        try:
            return await self.get_thread(uuid.UUID(name), tenant_id=tenant_id)
        except (ValueError, ThreadNotFound):
            pass  # not a thread id of this tenant: a chat id
        if create:
            return (await self.thread_for_chat(tenant_id=tenant_id, chat_id=name))[0]
        async with self._statement() as conn:
            row = (await conn.execute(GET_THREAD_BY_CHAT_ID, {"tenant_id": tenant_id, "chat_id": name})).first()
        if row is None:
            raise ThreadNotFound(name)
        return thread_from_row(row)

    async def get_thread(self, thread_id: uuid.UUID, *, tenant_id: str | None) -> Thread:
        """The thread, or :class:`ThreadNotFound` (also for another tenant's)."""
        async with self._statement() as conn:
            row = (await conn.execute(GET_THREAD, {"thread_id": thread_id, "tenant_id": tenant_id})).first()
        if row is None:
            raise ThreadNotFound(str(thread_id))
        return thread_from_row(row)

    async def list_threads(
        self, *, tenant_id: str | None, limit: int = 50, before: tuple[datetime, uuid.UUID] | None = None
    ) -> list[Thread]:
        """Newest first; ``before`` is the keyset cursor ``(created_at, id)`` of the last row seen."""
        params = {"tenant_id": tenant_id, **page_params(before, limit)}
        async with self._statement() as conn:
            rows = (await conn.execute(LIST_THREADS, params)).all()
        return [thread_from_row(r) for r in rows]

    async def thread_messages(
        self, thread_id: uuid.UUID, *, tenant_id: str | None, after: int = -1, limit: int = 100
    ) -> list[ThreadMessage]:
        """A page of the history, oldest first, with ``index > after``."""
        async with self._statement() as conn:
            await self._existing_thread(conn, thread_id, tenant_id)
            params = {"thread_id": thread_id, "after": after, "limit": limit}
            rows = (await conn.execute(THREAD_MESSAGES, params)).all()
        return [message_from_row(r) for r in rows]

    async def thread_history(self, thread_id: uuid.UUID, *, run_id: uuid.UUID) -> list[dict[str, Any]]:
        """What ``run_id``'s attempt sees as ``ctx.thread.messages``: the messages of the runs
        before it (its own, from an earlier attempt, come back with its checkpoint)."""
        async with self._statement() as conn:
            rows = (await conn.execute(THREAD_HISTORY, {"thread_id": thread_id, "run_id": run_id})).all()
        return [r.message for r in rows]

    async def list_thread_runs(
        self,
        thread_id: uuid.UUID,
        *,
        tenant_id: str | None,
        status: Status | None = None,
        limit: int = 50,
        before_turn: int | None = None,
    ) -> list[tuple[int, Run]]:
        """The thread's runs with their turns, latest turn first, below ``before_turn``."""
        async with self._statement() as conn:
            await self._existing_thread(conn, thread_id, tenant_id)
            params = {
                "thread_id": thread_id,
                "status": status.value if status else None,
                "before_turn": before_turn or _NO_TURN,
                "limit": limit,
            }
            rows = (await conn.execute(LIST_THREAD_RUNS, params)).all()
        return [(r.thread_turn, Run.from_row(r)) for r in rows]

    async def enqueue_in_thread(
        self, thread_id: uuid.UUID, new: NewRun, *, strategy: Strategy = Strategy.ENQUEUE
    ) -> tuple[Run, bool, list[Run]]:
        """A run in the thread, after ``strategy`` dealt with the runs in flight; ``(run,
        created, runs cancelled now)`` (pending runs a strategy stopped at once; a leased one
        is only asked to stop and ends through its worker).

        The new run and the cancels commit together. ``reject`` raises :class:`ThreadBusy` and
        creates nothing while a run of the thread is in flight. A repeat with the same
        idempotency key returns the first run, whatever the thread is doing now.
        """
        self._check_refusal(new)
        async with self.create_turns.turn(new.tenant_id), self._tx() as conn:
            row = await self._locked_thread(conn, thread_id, new.tenant_id)
            if new.idempotency_key is not None:
                existing = await self._run_by_idempotency_key(conn, new)
                if existing is not None:
                    return existing, False, []
            inflight = [r.id for r in await conn.execute(INFLIGHT_THREAD_RUNS, {"thread_id": thread_id})]
            cancelled: list[Run] = []
            if inflight and strategy is Strategy.REJECT:
                raise ThreadBusy(str(thread_id))
            if inflight and strategy in CANCEL_REASONS:
                cancelled = await self._stop_inflight(conn, thread_id, inflight, strategy)
            run, created = await self._insert_run(conn, new, thread_id=thread_id, thread_turn=row.run_count + 1)
        return run, created, [r for r in cancelled if r.status is Status.CANCELLED]

    async def regenerate_in_thread(self, thread_id: uuid.UUID, new: NewRun) -> Run:
        """A new answer to the thread's last question: the messages of its latest run go from
        the history (and its graph state from a LangGraph thread's memory) and ``new`` takes
        its place at the end. :class:`ThreadBusy` while a run of
        the thread is in flight (only a finished answer can be replaced)."""
        self._check_refusal(new)
        async with self.create_turns.turn(new.tenant_id), self._tx() as conn:
            row = await self._locked_thread(conn, thread_id, new.tenant_id)
            if (await conn.execute(INFLIGHT_THREAD_RUNS, {"thread_id": thread_id})).first() is not None:
                raise ThreadBusy(str(thread_id))
            params = {"thread_id": thread_id, "status": None, "before_turn": _NO_TURN, "limit": 1}
            last = (await conn.execute(LIST_THREAD_RUNS, params)).first()
            if last is not None:
                await conn.execute(ROLL_BACK_RUNS, {"thread_id": thread_id, "run_ids": [last.id]})
            run, _ = await self._insert_run(conn, new, thread_id=thread_id, thread_turn=row.run_count + 1)
        return run

    async def delete_thread(self, thread_id: uuid.UUID, *, tenant_id: str | None) -> None:
        """Delete an idle thread with its messages and runs; :class:`ThreadBusy` while a run of
        it is in flight."""
        async with self._tx() as conn:
            await self._locked_thread(conn, thread_id, tenant_id)
            if (await conn.execute(INFLIGHT_THREAD_RUNS, {"thread_id": thread_id})).first() is not None:
                raise ThreadBusy(str(thread_id))
            await conn.execute(DELETE_THREAD, {"thread_id": thread_id})

    async def stop_thread_runs(
        self, thread_id: uuid.UUID, run_ids: list[uuid.UUID], *, tenant_id: str, strategy: Strategy
    ) -> list[Run]:
        """Stop these runs of the thread the way ``strategy`` stops the runs in flight
        (``rollback`` also takes back their messages and graph state); the runs it cancelled
        or asked to stop (a terminal one is left as it is)."""
        async with self._tx() as conn:
            await self._locked_thread(conn, thread_id, tenant_id)
            return await self._stop_inflight(conn, thread_id, run_ids, strategy)

    async def _stop_inflight(
        self, conn: AsyncConnection, thread_id: uuid.UUID, run_ids: list[uuid.UUID], strategy: Strategy
    ) -> list[Run]:
        reason = CANCEL_REASONS[strategy]
        params = {
            "run_ids": run_ids,
            "tenant_id": None,  # the thread's runs: the thread's tenant was checked under its lock
            "reason": reason,
            **events_params([("run.cancel_requested", {"reason": reason})]),
        }
        rows = (await conn.execute(REQUEST_CANCEL, params)).all()
        if strategy is Strategy.ROLLBACK:
            await conn.execute(ROLL_BACK_RUNS, {"thread_id": thread_id, "run_ids": run_ids})
        return [Run.from_row(r) for r in rows]

    async def _locked_thread(self, conn: AsyncConnection, thread_id: uuid.UUID, tenant_id: str | None) -> Any:
        row = (await conn.execute(LOCK_THREAD, {"thread_id": thread_id, "tenant_id": tenant_id})).first()
        if row is None:
            raise ThreadNotFound(str(thread_id))
        return row

    async def _existing_thread(self, conn: AsyncConnection, thread_id: uuid.UUID, tenant_id: str | None) -> None:
        row = (await conn.execute(GET_THREAD, {"thread_id": thread_id, "tenant_id": tenant_id})).first()
        if row is None:
            raise ThreadNotFound(str(thread_id))
