"""The peers' worker processes (started by :mod:`bench.peers`): a no-op job in each queue's own
run loop, configured as its documentation and its own benchmark recommend.

``--stamp`` prints ``<payload> <time.time()>`` when a job starts, for pickup latency.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import time
from datetime import timedelta
from typing import Any

try:  # PgQueuer's own benchmark runs on uvloop; give it that advantage too.
    from uvloop import run
except ImportError:  # pragma: no cover
    from asyncio import run  # type: ignore[assignment]


async def pgqueuer_worker(dsn: str, *, batch_size: int, instances: int, stamp: bool) -> None:
    import asyncpg
    from pgqueuer import PgQueuer
    from pgqueuer.db import AsyncpgDriver

    queuers = []
    for _ in range(instances):
        pgq = PgQueuer(AsyncpgDriver(await asyncpg.connect(dsn)))

        @pgq.entrypoint("noop")
        async def noop(job: Any) -> None:
            if stamp:
                print(f"{job.payload.decode()} {time.time()!r}", flush=True)

        queuers.append(pgq)
    loop = asyncio.get_running_loop()
    for q in queuers:
        loop.add_signal_handler(signal.SIGTERM, q.shutdown.set)
    await asyncio.gather(
        *(q.run(batch_size=batch_size, dequeue_timeout=timedelta(seconds=30)) for q in queuers)
    )


async def procrastinate_worker(dsn: str, *, concurrency: int) -> None:
    import procrastinate

    # One pooled connection per concurrent job, so job slots never wait for the pool.
    connector = procrastinate.PsycopgConnector(conninfo=dsn, min_size=concurrency, max_size=concurrency)
    app = procrastinate.App(connector=connector)

    @app.task(name="noop")
    async def noop() -> None:
        return None

    async with app.open_async():
        await app.run_worker_async(concurrency=concurrency, install_signal_handlers=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("queue", choices=["pgqueuer", "procrastinate"])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--instances", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--stamp", action="store_true")
    args = parser.parse_args()
    if args.queue == "pgqueuer":
        run(
            pgqueuer_worker(
                args.dsn, batch_size=args.batch_size, instances=args.instances, stamp=args.stamp
            )
        )
    else:
        run(procrastinate_worker(args.dsn, concurrency=args.concurrency))


if __name__ == "__main__":
    main()
