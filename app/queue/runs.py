"""Runs as the API sees them: create (idempotently), read, list, and ask to stop."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.errors import database_down
from app.domain import Run, Status
from app.errors import IdempotencyConflict, LimitExceeded, RunFinished, RunNotFound
from app.queue.codec import dumps, events_params, page_params
from app.queue.statements import statement
from app.queue.store import Store

log = logging.getLogger(__name__)

ENQUEUE = statement("enqueue")
ENQUEUE_MANY = statement("enqueue_many")
GET_BY_IDEMPOTENCY_KEY = statement("get_by_idempotency_key")
GET_RUN = statement("get_run")
LIST_RUNS = statement("list_runs")
REQUEST_CANCEL = statement("request_cancel")
# Statistics that already count a bulk enqueue's runs when it commits. Without them the planner
# takes the claim's pending set for a row or two and reads and sorts the whole backlog on every
# claim (6 ms instead of 0.7 ms with 20,000 runs pending) until autovacuum's next ANALYZE; run
# in the enqueue's own transaction, ANALYZE counts its uncommitted rows.
ANALYZE_RUNS = statement("analyze_runs")
ANALYZE_LOCK_TIMEOUT = statement("analyze_lock_timeout")
BULK_ANALYZE_MIN_RUNS = 1000



async def _analyze_runs(conn: AsyncConnection) -> None:
    """ANALYZE ``agent_runs`` inside ``conn``'s transaction, or skip it if that would wait (a
    running autovacuum holds the lock) or is not allowed (a role that does not own the table)."""
    try:
        async with conn.begin_nested():
            await conn.execute(ANALYZE_LOCK_TIMEOUT)
            await conn.execute(ANALYZE_RUNS)
    except DBAPIError as exc:
        if database_down(exc):
            raise
        log.warning("statistics not refreshed after a bulk enqueue: %s", exc.orig)


@dataclass(frozen=True, slots=True)
class NewRun:
    """A run to create, as ``POST /runs`` (and ``POST /threads/{id}/runs``) describe it."""

    tenant_id: str
    agent: str
    input: Mapping[str, Any]
    budget: Mapping[str, Any] | None = None
    priority: int = 0
    max_attempts: int = 3
    delay_s: float = 0.0
    on_disconnect: str = "continue"
    disconnect_grace_s: float = 30.0
    idempotency_key: str | None = None
    request_digest: str | None = None
    webhook: Mapping[str, Any] | None = None
    traceparent: str | None = None  # the creating request's trace context (docs/usage.md)


class Runs(Store):
    async def enqueue(self, new: NewRun) -> tuple[Run, bool]:
        """Store a pending run with its ``run.queued`` event; ``(run, created)``.

        A repeat with the same idempotency key returns the first run when the request digest
        matches and raises :class:`IdempotencyConflict` when it does not.
        """
        self._check_refusal(new)
        async with self.create_turns.turn(new.tenant_id), self._statement() as conn:
            return await self._insert_run(conn, new)

    async def _insert_run(
        self, conn: AsyncConnection, new: NewRun, *, thread_id: uuid.UUID | None = None, thread_turn: int | None = None
    ) -> tuple[Run, bool]:
        """The ``enqueue`` statement on ``conn``; in a thread, the caller holds the thread's row lock.
        A tenant over its create rate or ``max_pending`` gets :class:`LimitExceeded`, and nothing
        is stored (the caller asked :meth:`_check_refusal` first, before its turn)."""
        params = {
            "tenant_id": new.tenant_id,
            "agent": new.agent,
            "priority": new.priority,
            "max_attempts": new.max_attempts,
            "delay_s": float(new.delay_s),
            "aging_s": self.aging_s,
            "input": dumps(new.input),
            "budget": dumps(new.budget or {}),
            "idempotency_key": new.idempotency_key,
            "request_hash": new.request_digest,
            "on_disconnect": new.on_disconnect,
            "disconnect_grace_s": float(new.disconnect_grace_s),
            "webhook": dumps(new.webhook) if new.webhook is not None else None,
            "thread_id": thread_id,
            "thread_turn": thread_turn,
            "traceparent": new.traceparent,
            "limit_per_s": self.limits.create_per_s,
            "limit_burst": self.limits.create_burst,
            "limit_max_pending": self.limits.max_pending,
        }
        row = (await conn.execute(ENQUEUE, params)).one()
        if row.limit_refused is not None:
            raise self.refusals.remember(
                "create",
                LimitExceeded(
                    tenant_id=new.tenant_id,
                    limit="rate" if row.limit_refused == "rate_limited" else "pending",
                    quota=row.limit_quota,
                    retry_after_s=row.limit_retry_after_s,
                    window_s=row.limit_window_s,
                ),
            )
        if row.id is not None:
            return Run.from_row(row), True
        # ON CONFLICT waited for the first inserter to commit; this next statement's
        # snapshot sees its row.
        existing = await self._run_by_idempotency_key(conn, new)
        assert existing is not None
        return existing, False

    def _check_refusal(self, new: NewRun) -> None:
        """Until a refused tenant's wait is over, refuse its creates at once (a repeat with an
        idempotency key asks the database: it may name a run already created)."""
        if new.idempotency_key is None:
            self.refusals.check(new.tenant_id, "create")

    async def _run_by_idempotency_key(self, conn: AsyncConnection, new: NewRun) -> Run | None:
        """The run an earlier request with ``new``'s key created, or :class:`IdempotencyConflict`
        when that request's body was another."""
        params = {"tenant_id": new.tenant_id, "idempotency_key": new.idempotency_key}
        existing = (await conn.execute(GET_BY_IDEMPOTENCY_KEY, params)).first()
        if existing is None:
            return None
        if existing._mapping["request_hash"] != new.request_digest:
            raise IdempotencyConflict(new.idempotency_key)
        return Run.from_row(existing)

    async def find_by_idempotency_key(self, *, tenant_id: str, idempotency_key: str) -> Run | None:
        """The tenant's run created with ``idempotency_key``, if any (an AG-UI client names
        its runs by the ``runId`` it sent: docs/frontends-ag-ui.md)."""
        params = {"tenant_id": tenant_id, "idempotency_key": idempotency_key}
        async with self._statement() as conn:
            row = (await conn.execute(GET_BY_IDEMPOTENCY_KEY, params)).first()
        return None if row is None else Run.from_row(row)

    async def enqueue_many(
        self,
        *,
        tenant_id: str,
        agent: str,
        inputs: Sequence[Mapping[str, Any]],
        priority: int = 0,
        max_attempts: int = 3,
        delay_s: float = 0.0,
    ) -> list[uuid.UUID]:
        """Store many pending runs (each with its ``run.queued``) in one statement; their ids."""
        if not inputs:
            return []
        params = {
            "tenant_id": tenant_id,
            "agent": agent,
            "priority": priority,
            "max_attempts": max_attempts,
            "aging_s": self.aging_s,
            "delay_s": delay_s,
            "inputs": [dumps(i) for i in inputs],
        }
        async with self._tx() as conn:
            ids = (await conn.execute(ENQUEUE_MANY, params)).scalar()
            if len(inputs) >= BULK_ANALYZE_MIN_RUNS:
                await _analyze_runs(conn)
        return list(ids or [])

    async def get_run(self, run_id: uuid.UUID, *, tenant_id: str | None) -> Run:
        """The run, or :class:`RunNotFound` (also for another tenant's run)."""
        return (await self.get_run_with_key(run_id, tenant_id=tenant_id))[0]

    async def get_run_with_key(self, run_id: uuid.UUID, *, tenant_id: str | None) -> tuple[Run, str | None]:
        """The run and the idempotency key it was created with (an AG-UI replay names the
        client's ``runId``, kept there, as the live stream did)."""
        async with self._statement() as conn:
            row = (await conn.execute(GET_RUN, {"run_id": run_id, "tenant_id": tenant_id})).first()
        if row is None:
            raise RunNotFound(str(run_id))
        return Run.from_row(row), row._mapping["idempotency_key"]

    async def list_runs(
        self,
        *,
        tenant_id: str | None,
        status: Status | None = None,
        limit: int = 50,
        before: tuple[datetime, uuid.UUID] | None = None,
    ) -> list[Run]:
        """Newest first; ``before`` is the keyset cursor ``(created_at, id)`` of the last row seen."""
        params = {"tenant_id": tenant_id, "status": status.value if status else None, **page_params(before, limit)}
        async with self._statement() as conn:
            rows = (await conn.execute(LIST_RUNS, params)).all()
        return [Run.from_row(r) for r in rows]

    async def request_cancel(
        self, run_id: uuid.UUID, *, tenant_id: str | None, reason: str = "user", note: str | None = None
    ) -> Run:
        """Pending → ``cancelled`` now; leased → cancel requested (the worker finishes it).

        A repeat while the cancel is under way returns the run; a terminal run raises
        :class:`RunFinished`.
        """
        data: dict[str, Any] = {"reason": reason} | ({"note": note} if note else {})
        params = {
            "run_ids": [run_id],
            "tenant_id": tenant_id,
            "reason": reason,
            **events_params([("run.cancel_requested", data)]),
        }
        for _ in range(3):  # an admin requeue can make a finished run pending under us; look again
            async with self._tx() as conn:
                row = (await conn.execute(REQUEST_CANCEL, params)).first()
                if row is not None:
                    return Run.from_row(row)
                row = (await conn.execute(GET_RUN, {"run_id": run_id, "tenant_id": tenant_id})).first()
            if row is None:
                raise RunNotFound(str(run_id))
            run = Run.from_row(row)
            if run.is_terminal:
                raise RunFinished(str(run_id))
            if run.status is Status.LEASED and run.cancel_requested_at is not None:
                return run
        raise RunNotFound(str(run_id))  # pragma: no cover - needs three races in a row
