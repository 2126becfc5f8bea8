"""Wiring of one worker process: claim loop, heartbeat thread, LISTEN, reaper, shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

import uvloop
from prometheus_client import start_http_server

from app import heap, tracing
from app.agents.model_client import close_shared_clients
from app.db.engine import worker_engines
from app.db.url import asyncpg_dsn
from app.domain import WorkerInfo
from app.guards.redact import Redactor
from app.logs import configure_logging, log_context
from app.queue import Queue
from app.settings import Settings
from app.worker.deadline import MARGIN_S, StopDeadline
from app.worker.lease import Heartbeat
from app.worker.reaper import reap_forever
from app.worker.runner import Runner
from app.worker.wakeup import Wakeup
from app.worker.webhooks import sender_from_settings

log = logging.getLogger(__name__)


def run_worker(settings: Settings, *, database_url: str, concurrency: int) -> int:
    """Run until SIGTERM/SIGINT, then shut down gracefully; the process's exit status."""
    configure_logging(settings.log_format, settings.log_level)
    tracing.configure("runq-worker")  # only when OTEL_* asks for traces (docs/usage.md)
    if settings.worker_metrics_port:
        start_http_server(settings.worker_metrics_port)

    async def main() -> None:
        stop = asyncio.Event()
        deadline = StopDeadline(settings.shutdown_grace_s + MARGIN_S)

        def stopping() -> None:
            stop.set()
            deadline.arm()

        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stopping)
        try:
            await serve(settings, database_url=database_url, concurrency=concurrency, stop=stop)
        finally:
            deadline.disarm()

    heap.settle()
    uvloop.run(main())  # the loop uvicorn gives the API: its reads and timers cost less CPU
    return 0


async def serve(
    settings: Settings, *, database_url: str, concurrency: int, stop: asyncio.Event
) -> None:
    """Claim and execute runs until ``stop`` is set; then drain within the grace period."""
    worker = WorkerInfo.start(slots=concurrency)
    worker_id = worker.worker_id
    with log_context(worker_id=worker_id):
        engine, claim_engine = worker_engines(database_url, settings)
        queue = Queue.from_settings(engine, settings, claim_engine=claim_engine)
        heartbeat = Heartbeat(
            database_url=database_url,
            worker=worker,
            lease_s=settings.lease_s,
            interval_s=settings.heartbeat_s,
            prepared_statements=settings.db_prepared_statements,
        )
        runner = Runner(
            queue=queue,
            heartbeat=heartbeat,
            worker_id=worker_id,
            concurrency=concurrency,
            agents=settings.agent_registry,
            redactor=Redactor(settings.redact_roots),
            poll_s=settings.poll_s,
            lease_s=settings.lease_s,
            max_data_bytes=settings.max_data_bytes,
        )
        sender = sender_from_settings(queue, settings)
        wakeup = Wakeup(
            asyncpg_dsn(settings.listen_database_url or database_url),
            worker_id=worker_id,
            on_new_run=runner.wake,
            on_cancel=runner.cancel_requested,
            on_webhook=sender.wake,
            on_listening=runner.listening,
        )
        log.info("worker started with %d slots", concurrency)
        try:
            with heartbeat:
                background = [
                    asyncio.create_task(wakeup.run(), name="listen"),
                    asyncio.create_task(sender.run(), name="webhook-sender"),
                    asyncio.create_task(
                        reap_forever(
                            queue,
                            interval_s=settings.reaper_s,
                            retention_s=settings.retention_days * 86400,
                        ),
                        name="reaper",
                    ),
                ]
                claiming = asyncio.create_task(runner.claim_until_stopped(), name="claim-loop")
                await stop.wait()
                log.info("stopping: no new claims")
                runner.stop_claiming()
                await claiming
                await runner.drain(settings.shutdown_grace_s)
                for task in background:
                    task.cancel()
                for task in background:
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
        finally:
            await close_shared_clients()  # the openai agent's model connections
            await engine.dispose()
            if claim_engine is not None:
                await claim_engine.dispose()
        log.info("worker stopped")
