"""The cluster of the harness: PostgreSQL, API processes and worker processes, each started
inside its host's namespace, all stopped at the end (bench.procs.children)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import resource
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from app.api.keys import create_key
from app.db.migrate import upgrade
from bench.api_server import TENANT
from bench.http import connection
from bench.procs import PYTHON, Child, children, connect, wait_for
from bench.scale.netns import Host

PG_PORT = 5432
API_PORT = 8000
WORKER_READY = "application_name = 'runq-listen'"
STOP_TIMEOUT_S = 30.0
# Short leases, so that a partition longer than a lease fits in a short run; quick reaper
# passes on every worker; no shutdown grace (a stopped worker releases its runs at once).
WORKER_SETTINGS = {
    "RUNQ_LEASE_S": "5",
    "RUNQ_HEARTBEAT_S": "1",
    "RUNQ_REAPER_S": "2",
    "RUNQ_POLL_S": "5",
    "RUNQ_SHUTDOWN_GRACE_S": "0",
    "RUNQ_DB_POOL_SIZE": "2",
    "RUNQ_LOG_FORMAT": "json",
}


@dataclass(frozen=True, slots=True)
class Api:
    host: Host
    port: int
    child: Child

    def rss_mb(self) -> float:
        status = Path(f"/proc/{self.child.proc.pid}/status").read_text()
        return int(next(line for line in status.splitlines() if line.startswith("VmRSS")).split()[1]) / 1024


@dataclass
class Cluster:
    url: str
    key: str
    apis: list[Api]
    worker_hosts: list[Host]
    stack: AsyncExitStack
    workers: dict[int, tuple[Host, Child]] = field(default_factory=dict)  # by pid

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"}

    async def add_workers(self, total: int, *, concurrency: int) -> None:
        """Start workers, round-robin over the worker hosts, until ``total`` run; wait until
        every one of them listens (idle, before any work exists)."""
        argvs, hosts = [], []
        for n in range(len(self.workers), total):
            host = self.worker_hosts[n % len(self.worker_hosts)]
            argvs.append(host.exec([PYTHON, "-m", "app.worker", "--concurrency", str(concurrency)]))
            hosts.append(host)
        started = await self.stack.enter_async_context(
            children(argvs, env={"RUNQ_DATABASE_URL": self.url, **WORKER_SETTINGS}, grace_s=5)
        )
        for host, child in zip(hosts, started, strict=True):
            self.workers[child.proc.pid] = (host, child)
        async with connect(self.url) as conn:

            async def listening() -> bool:
                n = await conn.fetchval(f"SELECT count(*) FROM pg_stat_activity WHERE {WORKER_READY}")
                return bool(n >= total)

            await wait_for(listening, timeout_s=600, what=f"{total} workers", every_s=0.5, watch=started)
        await asyncio.sleep(1.0)

    async def stop_workers(self) -> None:
        """Stop every worker (SIGTERM: a clean exit, its registry row gone), e.g. to go on with
        fewer, larger ones."""
        for _, child in self.workers.values():
            child.proc.terminate()
        try:  # a worker ends itself past its grace (app/worker/deadline.py); this is the backstop
            async with asyncio.timeout(STOP_TIMEOUT_S):
                await asyncio.gather(*(child.proc.wait() for _, child in self.workers.values()))
        except TimeoutError:
            for _, child in self.workers.values():
                if child.proc.returncode is None:
                    print(f"warning: worker {child.proc.pid} ignored SIGTERM; killed", file=sys.stderr)
                    child.proc.kill()
            await asyncio.gather(*(child.proc.wait() for _, child in self.workers.values()))
        self.workers.clear()

    def host_of(self, worker_id: str) -> str:
        """The namespace of the worker ``host:pid:boot_id`` (one hostname for all: by pid)."""
        return self.workers[int(worker_id.split(":")[1])][0].name

    async def post_run(self, api: Api, body: dict[str, object]) -> str:
        async with connection(api.host.address, api.port) as conn:
            status, answer = await conn.request("POST", "/runs", headers=self.auth, body=json.dumps(body).encode())
        if status != 201:
            raise RuntimeError(f"POST /runs: {status} {answer[:200]!r}")
        return str(json.loads(answer)["id"])


@asynccontextmanager
async def cluster(db: Host, api_hosts: list[Host], worker_hosts: list[Host], *, apis: int) -> AsyncIterator[Cluster]:
    async with AsyncExitStack() as stack:
        root = _data_root()
        stack.callback(shutil.rmtree, root, True)  # after the server stopped (exits run in reverse)
        (pg,) = await stack.enter_async_context(
            children([db.exec([PYTHON, "-m", "bench.scale.postgres", str(root / "pgdata"), db.address, str(PG_PORT)])], env={})
        )
        await wait_for(lambda: _accepts(db.address, PG_PORT), timeout_s=120, what="PostgreSQL", watch=[pg])
        url = f"postgresql://postgres@{db.address}:{PG_PORT}/runq"
        await _ready(url)
        await asyncio.to_thread(upgrade, url)
        async with connect(url) as conn:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        key = await create_key(url, tenant_id=TENANT)
        placed = [(api_hosts[n % len(api_hosts)], API_PORT + n) for n in range(apis)]
        argvs = [
            host.exec([PYTHON, "-m", "uvicorn", "app.main:app", "--host", host.address, "--port", str(port),
                       "--log-level", "warning", "--no-access-log"])
            for host, port in placed
        ]
        started = await stack.enter_async_context(
            children(argvs, env={"RUNQ_DATABASE_URL": url, "RUNQ_LOG_FORMAT": "json", "RUNQ_DB_POOL_SIZE": "20"})
        )
        running = [Api(host, port, child) for (host, port), child in zip(placed, started, strict=True)]
        for api in running:
            await wait_for(lambda api=api: _healthy(api), timeout_s=120, what="an API", every_s=0.2, watch=started)
        yield Cluster(url, key, running, worker_hosts, stack)


def _data_root() -> Path:
    root = Path(tempfile.mkdtemp(prefix="runq-scale-", dir="/tmp"))
    root.chmod(0o755)  # the server drops to `nobody` under root
    return root


async def _accepts(address: str, port: int) -> bool:
    with contextlib.suppress(OSError):
        _, writer = await asyncio.open_connection(address, port)
        writer.close()
        return True
    return False


async def _ready(url: str) -> None:
    async def answers() -> bool:
        try:
            async with connect(url):
                return True
        except (OSError, Exception):  # starting up: "the database system is starting up"
            return False

    await wait_for(answers, timeout_s=60, what="PostgreSQL to answer", every_s=0.2)


async def _healthy(api: Api) -> bool:
    try:
        async with connection(api.host.address, api.port) as conn:
            status, _ = await conn.request("GET", "/readyz", headers={})
            return status == 200
    except OSError:
        return False


def raise_fd_limit() -> None:
    """10,000 streams are 10,000 sockets in the load generator."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if hard < 12_000:
        print(f"warning: RLIMIT_NOFILE hard limit {hard} < 12,000", file=sys.stderr)

