"""The soak's cluster: its own PostgreSQL, API processes and worker processes, and the faults.

The server is the soak's own (the shared test server must stay up for the other tests) so it
can be restarted, always on the same port, as a managed PostgreSQL fails over under one address.
Every process is killed in :meth:`SoakCluster.close`, a stopped worker continued first.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import signal
import tempfile
from pathlib import Path

import asyncpg

from app.api.keys import create_key
from app.db.embedded import EmbeddedPostgres
from app.db.migrate import upgrade
from app.db.url import asyncpg_dsn
from tests import pgbouncer_support
from tests.api_support import ApiProcess, free_port
from tests.chaos.conftest import CHAOS_ENV, WorkerProcess

# Short timings, so that leases expire, the reaper acts and retries come back within the soak.
SOAK_ENV = CHAOS_ENV | {
    "RUNQ_LEASE_S": "2",
    "RUNQ_HEARTBEAT_S": "0.5",
    "RUNQ_REAPER_S": "0.5",
    "RUNQ_POLL_S": "0.2",
    "RUNQ_RETRY_BASE_S": "0.05",
    "RUNQ_RETRY_MAX_S": "0.5",
    "RUNQ_SHUTDOWN_GRACE_S": "1",
}
LEASE_S = float(SOAK_ENV["RUNQ_LEASE_S"])
# What app/worker sets as application_name on its connections (pool, heartbeat thread, LISTEN).
WORKER_APPLICATIONS = ("runq-worker", "runq-heartbeat", "runq-listen")


class SoakCluster:
    """``start()`` everything; ``close()`` in a finally block, whatever happened."""

    def __init__(self, *, workers: int, apis: int, concurrency: int) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="runq-soak-", dir="/tmp"))
        self.root.chmod(0o755)  # the server may run as `nobody`, which must reach its data dir
        self.logs = self.root / "logs"
        self.logs.mkdir()
        self.db = EmbeddedPostgres(self.root / "pgdata", port=free_port(), fast=True)
        self.url = ""
        self.concurrency = concurrency
        self.n_workers = workers
        self.n_apis = apis
        self.apis: list[ApiProcess] = []
        self.workers: list[WorkerProcess] = []
        self.every_worker: list[WorkerProcess] = []
        self.stopped: set[int] = set()  # pids under SIGSTOP
        # RUNQ_TEST_PGBOUNCER=1: the APIs and workers go through PgBouncer, LISTEN direct
        self.bouncer: pgbouncer_support.PgBouncer | None = None
        self.runq_env: dict[str, str] = {}

    def start(self) -> None:
        self.url = self.db.start()
        upgrade(self.url)
        runq_url = self.url
        if pgbouncer_support.ENABLED:
            self.bouncer = pgbouncer_support.PgBouncer(self.url).__enter__()
            runq_url = self.bouncer.url(self.db.database)
            self.runq_env = {"RUNQ_LISTEN_DATABASE_URL": self.url, "RUNQ_DB_PREPARED_STATEMENTS": "false"}
        self.runq_env["RUNQ_DATABASE_URL"] = runq_url
        # The APIs know the workers' agents: a create names one (the soak's bad-data runs) and is
        # checked against the registry before anything is stored.
        self.apis = [ApiProcess(runq_url, env=SOAK_ENV | self.runq_env) for _ in range(self.n_apis)]
        for _ in range(self.n_workers):
            self.workers.append(self._spawn_worker())
        for api in self.apis:
            api.wait_ready()
        for worker in self.workers:
            worker.wait_ready()

    async def key(self, tenant: str, *, admin: bool = False) -> str:
        return await create_key(self.url, tenant_id=tenant, admin=admin)

    def _spawn_worker(self) -> WorkerProcess:
        env = os.environ | SOAK_ENV | self.runq_env
        worker = WorkerProcess(len(self.every_worker), env=env, concurrency=self.concurrency, logs=self.logs)
        self.every_worker.append(worker)
        return worker

    # -- faults ----------------------------------------------------------------------------

    def running_workers(self) -> list[int]:
        return [i for i, w in enumerate(self.workers) if w.pid not in self.stopped]

    def kill_and_replace(self, index: int) -> tuple[int, int]:
        """SIGKILL worker ``index`` and start a new one in its place: ``(old pid, new pid)``."""
        victim = self.workers[index]
        victim.sigkill()
        self.workers[index] = self._spawn_worker()
        return victim.pid, self.workers[index].pid

    def freeze(self, index: int) -> int:
        pid = self.workers[index].pid
        os.kill(pid, signal.SIGSTOP)
        self.stopped.add(pid)
        return pid

    def thaw(self, pid: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        self.stopped.discard(pid)

    async def terminate_backends(self, rng: random.Random) -> list[str]:
        """``pg_terminate_backend`` on a random share of the workers' connections."""
        conn = await asyncpg.connect(asyncpg_dsn(self.url), server_settings={"application_name": "runq-soak"})
        try:
            rows = await conn.fetch(
                "SELECT pid, application_name FROM pg_stat_activity WHERE application_name = ANY($1::text[])",
                list(WORKER_APPLICATIONS),
            )
            chosen = rng.sample(rows, k=rng.randint(1, len(rows))) if rows else []
            for row in chosen:
                await conn.execute("SELECT pg_terminate_backend($1)", row["pid"])
            return [row["application_name"] for row in chosen]
        finally:
            await conn.close()

    async def leases_of(self, pid: int) -> list[str]:
        """Runs leased by the worker process ``pid`` (``locked_by`` is ``host:pid:boot``)."""
        conn = await asyncpg.connect(asyncpg_dsn(self.url), server_settings={"application_name": "runq-soak"})
        try:
            rows = await conn.fetch(
                "SELECT id FROM agent_runs WHERE status = 'leased' AND split_part(locked_by, ':', 2) = $1",
                str(pid),
            )
            return [str(r["id"]) for r in rows]
        finally:
            await conn.close()

    async def restart_database(self, down_s: float) -> None:
        """Stop PostgreSQL, stay down ``down_s``, start it again on the same port.

        Called on the main thread: the server dies with the thread that started it.
        """
        self.db.stop()
        await asyncio.sleep(down_s)
        url = self.db.start()
        assert url == self.url, f"the server came back at {url}, not {self.url}"

    # -- teardown --------------------------------------------------------------------------

    def close(self) -> None:
        for pid in list(self.stopped):
            self.thaw(pid)
        for worker in self.every_worker:
            if worker.proc.poll() is None:  # a reaped worker's pid may be another process's now
                with contextlib.suppress(Exception):
                    worker.kill_all()
        for api in self.apis:
            with contextlib.suppress(Exception):
                api.stop()
        if self.bouncer is not None:
            self.bouncer.__exit__(None, None, None)
        self.db.stop()

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
