"""What one database costs its PostgreSQL server while a section runs, seen from the outside.

Sampled every ``every_s`` from a session on the maintenance database (so the sampling itself
is neither a connection nor a commit of the database measured):

- connections: the database's sessions in ``pg_stat_activity``, the peak and its split by
  ``application_name``, and the peak of the whole server next to its ``max_connections``;
- CPU: every backend of the database read from ``/proc/<pid>/stat`` (a backend born during the
  window counts from zero, so connection start-up is in; one that exits between two samples
  loses what it spent since the last one), and the server's shared processes (WAL writer,
  checkpointer, background writer) apart, since on a shared server they also work for others.

Counted once the processes measured have exited (a backend flushes its statistics when it
exits; an idle one may hold them back for seconds):

- all commits: ``pg_stat_database.xact_commit`` of the database (read-only ones included);
- fsync'd commits: the transactions of the database that wrote WAL and committed, i.e. the
  commits that waited for a WAL flush (``synchronous_commit = on``), counted exactly from the WAL
  itself with ``pg_walinspect``: a COMMIT record whose transaction touched a block of the
  database; ``None`` where the extension is not available. Given a session on the database
  (``start(wal_conn=...)``), the WAL is read every ``WAL_EVERY`` samples while the window runs,
  so a long window on a busy shared server is counted before its segments are recycled;
- WAL fsync calls: ``pg_stat_wal.wal_sync`` (``pg_stat_io`` from PostgreSQL 18; server-wide:
  one flush may cover several commits, group commit; other databases and the WAL writer count).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import Counter
from typing import Any

import asyncpg

from bench.procs import APP_NAME, process_cpu_s

SHARED = ("walwriter", "checkpointer", "background writer")
ACTIVITY = "SELECT pid, datname, backend_type, application_name FROM pg_stat_activity"
COUNTERS = (
    "SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = $1) AS commits,"
    " ({wal_syncs}) AS wal_syncs, pg_current_wal_flush_lsn()::text AS lsn"
)
# PostgreSQL 18 moved the WAL's fsync count from pg_stat_wal to pg_stat_io.
WAL_SYNCS = {
    False: "SELECT wal_sync FROM pg_stat_wal",
    True: "SELECT sum(fsyncs)::bigint FROM pg_stat_io WHERE object = 'wal'",
}
# The transactions that committed and wrote a block of database $3 ("rel <tablespace>/<db>/<rel>").
WRITING_COMMITS = (
    "SELECT count(*) FROM (SELECT xid::text FROM pg_get_wal_records_info($1::text::pg_lsn, $2::text::pg_lsn)"
    " WHERE xid::text <> '0' GROUP BY xid::text"
    " HAVING bool_or(resource_manager = 'Transaction' AND record_type = 'COMMIT')"
    " AND bool_or(block_ref LIKE $3)) AS writers"
)
# The same per transaction, for one stretch of WAL read while the window runs: every transaction
# that wrote a block of database $3, and those that committed among $4 (writers seen earlier).
WAL_STRETCH = (
    "SELECT xid::text AS xid, bool_or(resource_manager = 'Transaction' AND record_type = 'COMMIT') AS committed,"
    " bool_or(block_ref LIKE $3) AS wrote"
    " FROM pg_get_wal_records_info($1::text::pg_lsn, $2::text::pg_lsn) WHERE xid::text <> '0' GROUP BY xid::text"
    " HAVING bool_or(block_ref LIKE $3) OR (bool_or(resource_manager = 'Transaction' AND record_type = 'COMMIT')"
    " AND xid::text = ANY($4::text[]))"
)
WAL_EVERY = 10


class PgObserver:
    def __init__(
        self, conn: asyncpg.Connection, database: str, *, harness_commits: int = 0, every_s: float = 0.2
    ) -> None:
        """``harness_commits``: how many writing commits the bench itself makes on the database
        in the window (they are taken off the counts; its sessions are left out of the rest)."""
        self._conn = conn
        self._database = database
        self._every_s = every_s
        self._harness_commits = harness_commits
        self._cpu_start: dict[int, float] = {}
        self._cpu_last: dict[int, float] = {}
        self._shared: set[int] = set()
        self._counters: asyncpg.Record | None = None
        self._counters_sql = ""
        self._task: asyncio.Task[None] | None = None
        self.peak_connections = 0
        self.peak_by_application: dict[str, int] = {}
        self.peak_server_connections = 0
        self._wal_conn: asyncpg.Connection | None = None
        self._wal_pattern = ""
        self._wal_lsn = ""
        self._wal_writers: set[str] = set()  # wrote a block of the database, no COMMIT seen yet
        self._wal_committed = 0
        self._wal_error: str | None = None

    async def start(self, *, wal_conn: asyncpg.Connection | None = None) -> None:
        """Counters and CPU at the start of the window, then sample until :meth:`stop_sampling`;
        ``wal_conn``, a session on the database, reads its WAL while the window runs."""
        # The window's WAL is read back afterwards: a checkpoint now makes the next one (which
        # recycles the segments before it) unlikely to fall inside the window.
        with contextlib.suppress(asyncpg.InsufficientPrivilegeError):
            await self._conn.execute("CHECKPOINT")
        version = int(await self._conn.fetchval("SHOW server_version_num"))
        self._counters_sql = COUNTERS.format(wal_syncs=WAL_SYNCS[version >= 180000])
        self._counters = await self._conn.fetchrow(self._counters_sql, self._database)
        self._wal_lsn = self._counters["lsn"]
        if wal_conn is not None:
            try:
                await wal_conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
                oid = await wal_conn.fetchval("SELECT oid FROM pg_database WHERE datname = current_database()")
                self._wal_conn, self._wal_pattern = wal_conn, f"%/{oid}/%"
            except asyncpg.PostgresError as exc:
                self._wal_error = f"{type(exc).__name__}: {exc}"
        mine = await self._sample()
        self._cpu_start = {pid: cpu for pid, cpu in self._cpu_last.items() if pid in mine}
        self._cpu_start |= {pid: self._cpu_last[pid] for pid in self._shared if pid in self._cpu_last}
        self._task = asyncio.create_task(self._sample_forever())

    async def _sample_forever(self) -> None:
        samples = 0
        while True:
            await asyncio.sleep(self._every_s)
            await self._sample()
            samples += 1
            if samples % WAL_EVERY == 0:
                await self._read_wal(await self._conn.fetchval("SELECT pg_current_wal_flush_lsn()::text"))

    async def _read_wal(self, until: str, conn: asyncpg.Connection | None = None) -> None:
        conn = conn or self._wal_conn
        if conn is None or self._wal_error is not None:
            return
        try:
            rows = await conn.fetch(
                WAL_STRETCH, self._wal_lsn, until, self._wal_pattern, list(self._wal_writers), timeout=60
            )
        except (asyncpg.PostgresError, TimeoutError) as exc:  # WAL recycled after all
            self._wal_error = f"{type(exc).__name__}: {exc}"
            return
        self._wal_lsn = until
        for row in rows:
            if row["committed"] and (row["wrote"] or row["xid"] in self._wal_writers):
                self._wal_committed += 1
                self._wal_writers.discard(row["xid"])
            elif row["wrote"]:
                self._wal_writers.add(row["xid"])

    async def _sample(self) -> set[int]:
        rows = await self._conn.fetch(ACTIVITY)
        mine = [r for r in rows if r["datname"] == self._database and r["application_name"] != APP_NAME]
        self.peak_server_connections = max(
            self.peak_server_connections, sum(1 for r in rows if r["backend_type"] == "client backend")
        )
        if len(mine) > self.peak_connections:
            self.peak_connections = len(mine)
            self.peak_by_application = dict(Counter(r["application_name"] or r["backend_type"] for r in mine))
        self._shared |= {r["pid"] for r in rows if r["backend_type"] in SHARED}
        for pid in {r["pid"] for r in mine} | self._shared:
            cpu = process_cpu_s(pid)
            if cpu is not None:
                self._cpu_last[pid] = cpu
        return {r["pid"] for r in mine}

    async def stop_sampling(self) -> dict[str, float]:
        """CPU seconds spent in the window: the database's backends and the shared processes."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._sample()
        spent = {pid: cpu - self._cpu_start.get(pid, 0.0) for pid, cpu in self._cpu_last.items()}
        return {
            "backends_s": sum(cpu for pid, cpu in spent.items() if pid not in self._shared),
            "shared_s": sum(cpu for pid, cpu in spent.items() if pid in self._shared),
        }

    async def counted(self, database_conn: asyncpg.Connection) -> dict[str, Any]:
        """Commit counters over the window; call once the processes measured have exited.
        ``database_conn`` is a session on the measured database (for ``pg_walinspect``)."""
        assert self._counters is not None
        before = self._counters
        after = await self._conn.fetchrow(self._counters_sql, self._database)
        out: dict[str, Any] = {
            "commits": after["commits"] - before["commits"] - self._harness_commits,
            "wal_syncs": after["wal_syncs"] - before["wal_syncs"],
            "fsynced_commits": None,
        }
        if self._wal_conn is not None:
            await self._read_wal(after["lsn"], database_conn)  # the window's session has closed
            if self._wal_error is None:
                out["fsynced_commits"] = self._wal_committed - self._harness_commits
            else:
                out["fsynced_commits_error"] = self._wal_error
            return out
        oid = await database_conn.fetchval("SELECT oid FROM pg_database WHERE datname = current_database()")
        try:
            await database_conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
            writers = await database_conn.fetchval(
                WRITING_COMMITS, before["lsn"], after["lsn"], f"%/{oid}/%", timeout=300
            )
            out["fsynced_commits"] = writers - self._harness_commits
        except (asyncpg.PostgresError, TimeoutError) as exc:  # no extension, or WAL recycled
            out["fsynced_commits_error"] = f"{type(exc).__name__}: {exc}"
        return out


def harness_cpu_s() -> float:
    """CPU seconds of this process (the bench: subscribers, sampling), all its threads."""
    times = os.times()
    return times.user + times.system
