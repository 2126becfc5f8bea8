"""The one PostgreSQL server every section measures on, and the databases made on it.

``RUNQ_BENCH_DATABASE_URL`` names a server where the bench may create and drop databases;
without it an embedded PostgreSQL (fsync on, default settings) is started in a temp dir. Every
section gets its own fresh database, so no section sees another's dead tuples or caches.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import asyncpg
from sqlalchemy.engine import make_url

from app.db.embedded import EmbeddedPostgres
from app.db.migrate import upgrade
from app.db.url import asyncpg_dsn

PREFIX = "runq_bench_"
TEMPLATE = PREFIX + "template"
SETTINGS = (
    "server_version",
    "fsync",
    "synchronous_commit",
    "full_page_writes",
    "shared_buffers",
    "max_connections",
    "shared_preload_libraries",
)


class BenchServer:
    """A server URL (its maintenance database) plus, when embedded, the process behind it."""

    def __init__(self, url: str, embedded: EmbeddedPostgres | None) -> None:
        self.url = url
        self.embedded = embedded
        self._template_ready = False
        self.statement_stats_loaded = False

    @classmethod
    @contextmanager
    def open(cls) -> Iterator[BenchServer]:
        configured = os.environ.get("RUNQ_BENCH_DATABASE_URL")
        if configured:
            yield cls(configured, None)
            return
        # The server drops to `nobody` under root: every parent of its data dir must be o+x.
        root = Path(tempfile.mkdtemp(prefix="runq-bench-", dir="/tmp"))
        root.chmod(0o755)
        # A fixed port, so that a restart (see load_statement_stats) keeps the URL.
        # 128 idle worker processes (the wakeups section) hold about four sessions each.
        server = EmbeddedPostgres(root / "pgdata", port=free_port(), database="postgres", max_connections=600)
        try:
            yield cls(server.start(), server)
        finally:
            server.stop()
            shutil.rmtree(root, ignore_errors=True)

    @property
    def source(self) -> str:
        return "embedded (pip wheel)" if self.embedded else "RUNQ_BENCH_DATABASE_URL"

    def database_url(self, name: str) -> str:
        return make_url(self.url).set(database=name).render_as_string(hide_password=False)

    async def admin(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        conn = await asyncpg.connect(asyncpg_dsn(self.url))
        try:
            return await conn.fetch(sql, *args)
        finally:
            await conn.close()

    async def describe(self) -> dict[str, str]:
        rows = await self.admin("SELECT n, current_setting(n) FROM unnest($1::text[]) AS n", list(SETTINGS))
        out = {r[0]: r[1] for r in rows}
        out["source"] = self.source
        out["version"] = (await self.admin("SELECT version()"))[0][0]
        return out

    async def create(self, name: str, *, template: str | None = None) -> str:
        """A new empty database (or a clone of ``template``), replacing any leftover of the name."""
        await self.drop(name)
        clone = f' TEMPLATE "{template}"' if template else ""
        await self.admin(f'CREATE DATABASE "{name}"{clone}')
        return self.database_url(name)

    async def drop(self, name: str) -> None:
        await self.admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    @asynccontextmanager
    async def database(self, section: str, *, migrated: bool = True) -> AsyncIterator[str]:
        """A fresh database for one section, dropped afterwards.

        runq's are clones of one template migrated through Alembic at the start of the run:
        the same schema as ``runq migrate`` gives, without paying the migration per section.
        """
        name = PREFIX + section
        if migrated and not self._template_ready:
            await asyncio.to_thread(upgrade, await self.create(TEMPLATE))
            self._template_ready = True
        url = await self.create(name, template=TEMPLATE if migrated else None)
        try:
            yield url
        finally:
            if self.embedded is None:  # an embedded cluster is deleted whole at the end
                await self.drop(name)

    async def close(self) -> None:
        if self._template_ready and self.embedded is None:
            await self.drop(TEMPLATE)

    async def load_statement_stats(self) -> bool:
        """Make ``pg_stat_statements`` usable, restarting the embedded server if it must.

        It needs ``shared_preload_libraries``: an external server either has it or the bench
        does without (the cost section then counts transactions). The embedded one is
        restarted with it before any section runs (ALTER SYSTEM, same data dir and port): it
        is what tells, per queue, how many statements a job takes and where the server's time
        goes, and most managed PostgreSQL services run with it loaded. The same restart turns
        on ``track_commit_timestamp``, so the SSE section can time delivery from each event's
        commit rather than from its transaction's start.
        """
        loaded = (await self.admin("SHOW shared_preload_libraries"))[0][0]
        if "pg_stat_statements" not in loaded:
            if self.embedded is None:
                return False
            await self.admin("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
            await self.admin("ALTER SYSTEM SET track_commit_timestamp = on")
            # Blocking on purpose: the server dies with the thread that started it
            # (PDEATHSIG), so it must be started from the main thread, not a pool thread.
            self.embedded.stop()
            self.url = self.embedded.start()
        await self.admin("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        self.statement_stats_loaded = True
        return True

    async def statement_stats(self, database: str) -> dict[str, tuple[int, float]]:
        """``(calls, total execution ms)`` per normalised statement on one database, from
        ``pg_stat_statements`` (empty when it is not loaded)."""
        if not self.statement_stats_loaded:
            return {}
        rows = await self.admin(
            "SELECT query, calls, total_exec_time FROM pg_stat_statements"
            " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1)",
            database,
        )
        return {r["query"]: (r["calls"], r["total_exec_time"]) for r in rows}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
