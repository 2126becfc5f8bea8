"""The ``runq`` command line."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import uuid
from collections.abc import Sequence

from app import cli_hooks
from app.console import parse_duration, print_json, print_table
from app.db.engine import create_engine
from app.domain import QueueError, Status
from app.queue import Queue
from app.settings import get_settings


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="runq", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("migrate", help="apply the database migrations")

    api = sub.add_parser("api", help="serve the HTTP API")
    api.add_argument("--host", default="127.0.0.1")
    api.add_argument("--port", type=int, default=8000)

    worker = sub.add_parser("worker", help="run a worker process (no web server)")
    worker.add_argument("--concurrency", type=int, default=4)

    dev = sub.add_parser("dev", help="embedded PostgreSQL + migrate + API + one worker")
    dev.add_argument("--host", default="127.0.0.1")
    dev.add_argument("--port", type=int, default=8000)
    dev.add_argument("--concurrency", type=int, default=4)

    keys = sub.add_parser("keys", help="API keys").add_subparsers(dest="keys_command", required=True)
    create = keys.add_parser("create", help="create a key and print it once")
    create.add_argument("--tenant", required=True)
    create.add_argument("--admin", action="store_true")

    runs = sub.add_parser("runs", help="inspect and act on runs (operators)")
    runs_sub = runs.add_subparsers(dest="runs_command", required=True)
    listing = runs_sub.add_parser("list", help="newest first")
    listing.add_argument("--status", choices=[s.value for s in Status])
    listing.add_argument("--tenant")
    listing.add_argument("--limit", type=int, default=50)
    for name in ("show", "cancel", "requeue"):
        runs_sub.add_parser(name).add_argument("run_id", type=uuid.UUID)
    sub.add_parser("workers", help="live leases by worker")
    sub.add_parser("stats", help="queue depth, in-flight per tenant, oldest pending age")
    purge = sub.add_parser("purge", help="delete finished runs and their events older than an age")
    purge.add_argument("--older-than", type=parse_duration, required=True, metavar="AGE")
    for command in (*runs_sub.choices.values(), sub.choices["workers"], sub.choices["stats"], purge):
        command.add_argument("--json", action="store_true", help="machine-readable output")
    cli_hooks.add_parsers(sub)
    return parser


RUN_COLUMNS = ("id", "tenant_id", "agent", "status", "attempts", "created_at", "error_code")


async def _operate(url: str, args: argparse.Namespace) -> int:
    """The operator commands, straight on the repository layer (admin scope: every tenant)."""
    settings = get_settings()
    engine = create_engine(url, pool_size=2)
    queue = Queue.from_settings(engine, settings)
    try:
        if args.command in cli_hooks.COMMANDS:
            return await cli_hooks.run(queue, settings, args)
        if args.command == "runs":
            if args.runs_command == "list":
                status = Status(args.status) if args.status else None
                runs = await queue.list_runs(tenant_id=args.tenant, status=status, limit=args.limit)
                if args.json:
                    print_json(runs)
                else:
                    print_table([dataclasses.asdict(r) for r in runs], RUN_COLUMNS)
                return 0
            action = {
                "show": lambda: queue.get_run(args.run_id, tenant_id=None),
                "cancel": lambda: queue.request_cancel(args.run_id, tenant_id=None, reason="operator"),
                "requeue": lambda: queue.requeue(args.run_id),
            }[args.runs_command]
            run = await action()
            if args.json:
                print_json(run)
            else:
                print_table([dataclasses.asdict(run)], (*RUN_COLUMNS, "locked_by", "error_message"))
            return 0
        if args.command == "workers":
            workers = await queue.live_leases()
            if args.json:
                print_json(workers)
            else:
                rows = [{"worker": w, **lease} for w, leases in workers.items() for lease in leases]
                print_table(rows, ("worker", "run_id", "tenant_id", "attempt", "lease_age_s", "heartbeat_at"))
            return 0
        if args.command == "stats":
            stats = await queue.stats()
            if args.json:
                print_json(stats)
            else:
                print_table([stats.by_status], [s.value for s in Status])
                print(f"\noldest pending: {stats.oldest_pending_age_s:.1f} s   dead in the last hour: {stats.dead_last_hour}\n")
                print_table([{"tenant": t, "in_flight": n} for t, n in stats.inflight_by_tenant.items()], ("tenant", "in_flight"))
            return 0
        if args.command == "purge":
            total = 0
            while deleted := await queue.purge_finished(older_than_s=args.older_than):
                total += deleted
            print_json({"purged": total}) if args.json else print(f"purged {total} runs")
            return 0
    except QueueError as exc:
        print(f"runq: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        await engine.dispose()
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    settings = get_settings()
    from app.db.runtime import database

    if args.command == "dev":
        from app.dev import run_dev

        return run_dev(settings, host=args.host, port=args.port, concurrency=args.concurrency)

    with database(settings) as url:
        if args.command == "migrate":
            from app.db.migrate import upgrade

            upgrade(url)
            return 0
        if args.command == "api":
            from app.api.server import serve

            serve(settings, database_url=url, host=args.host, port=args.port)
            return 0
        if args.command == "worker":
            from app.worker.main import run_worker

            return run_worker(settings, database_url=url, concurrency=args.concurrency)
        if args.command == "keys":
            from app.api.keys import create_key

            print(asyncio.run(create_key(url, tenant_id=args.tenant, admin=args.admin)))
            return 0
        return asyncio.run(_operate(url, args))


if __name__ == "__main__":
    sys.exit(main())
