"""One API process (``uvicorn app.main:app``) on a fresh port, with a tenant key for the bench."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from app.api.keys import create_key
from bench.http import answers_ok
from bench.procs import PYTHON, Child, children, wait_for
from bench.server import free_port

TENANT = "bench"


@dataclass
class Api:
    port: int
    key: str
    child: Child

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def rss_mb(self) -> tuple[float, float]:
        """(current, peak) resident set size of the API process, in MB."""
        fields = dict(
            line.split(":", 1) for line in Path(f"/proc/{self.child.proc.pid}/status").read_text().splitlines()
        )
        return tuple(int(fields[k].split()[0]) / 1024 for k in ("VmRSS", "VmHWM"))  # type: ignore[return-value]


@asynccontextmanager
async def running_api(url: str, **settings: str) -> AsyncIterator[Api]:
    port = free_port()
    argv = [PYTHON, "-m", "uvicorn", "app.main:app", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--log-level", "warning", "--no-access-log"]
    env = {"RUNQ_DATABASE_URL": url, "RUNQ_LOG_FORMAT": "json", **settings}
    key = await create_key(url, tenant_id=TENANT)
    async with children([argv], env=env) as (child,):
        await wait_for(
            lambda: answers_ok(port, "/readyz"), timeout_s=60, what="the API to answer /readyz", every_s=0.1, watch=[child]
        )
        await asyncio.sleep(0.2)
        yield Api(port, key, child)
