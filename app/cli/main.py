"""runq: a control plane for long-running AI agent runs, on PostgreSQL.

Without RUNQ_DATABASE_URL every command uses the embedded PostgreSQL of the project's data
folder (.runq/ at the project root, or RUNQ_DATA_DIR); while `runq dev` runs, that is its
server. `runq runs follow` with a key (RUNQ_KEY) is a client of the API instead (RUNQ_URL, else
the API of the local `runq dev`).
Errors are one line on stderr (--debug shows the traceback).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import uuid
from collections.abc import Sequence

from app.cli import agents as cli_agents
from app.cli import follow as cli_follow
from app.cli import hooks as cli_hooks
from app.cli import tenants as cli_tenants
from app.cli.console import (
    describe_error,
    describe_usage,
    parse_duration,
    parse_json,
    print_json,
    print_table,
)
from app.db.engine import engine_for
from app.domain import Run, Status, Usage
from app.guards.redact import redact_data
from app.queue import Queue, WorkerView
from app.settings import Settings, get_settings


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="runq", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sub.add_parser("migrate", help="apply the database migrations and list what was applied")

    api = sub.add_parser("api", help="serve the HTTP API")
    api.add_argument("--host", default="127.0.0.1")
    api.add_argument("--port", type=int, default=8000)

    worker = sub.add_parser("worker", help="run a worker process (no web server)")
    worker.add_argument("--concurrency", type=int, default=4, help="run slots (default 4)")

    dev = sub.add_parser("dev", help="embedded PostgreSQL, migrations, the API and one worker")
    dev.add_argument("--host", default="127.0.0.1")
    dev.add_argument("--port", type=int, default=8000)
    dev.add_argument("--concurrency", type=int, default=4, help="the worker's run slots")

    keys = sub.add_parser("keys", help="API keys").add_subparsers(dest="keys_command", required=True)
    create = keys.add_parser("create", help="create a key and print it (the only time it is shown)")
    create.add_argument("--tenant", required=True)
    create.add_argument("--admin", action="store_true", help="the key also reaches /admin")
    listing = keys.add_parser("list", help="keys by id and prefix (never the key itself)")
    listing.add_argument("--tenant")
    revoke = keys.add_parser("revoke", help="revoke a key; API processes refuse it within 10 s")
    revoke.add_argument("key", help="the key's id or prefix, as `runq keys list` shows them")
    for command in keys.choices.values():
        command.add_argument("--json", action="store_true", help="machine-readable output")

    runs = sub.add_parser("runs", help="inspect and act on runs (operators)")
    runs_sub = runs.add_subparsers(dest="runs_command", required=True)
    runs_list = runs_sub.add_parser("list", help="newest first")
    runs_list.add_argument("--status", choices=[s.value for s in Status])
    runs_list.add_argument("--tenant")
    runs_list.add_argument("--limit", type=int, default=50)
    for name, text in (("show", "one run"), ("cancel", "cancel a run"), ("requeue", "requeue a dead or cancelled run")):
        runs_sub.add_parser(name, help=text).add_argument("run_id", type=uuid.UUID)
    resume = runs_sub.add_parser("resume", help="resume a waiting run with a value for its wait")
    resume.add_argument("run_id", type=uuid.UUID)
    resume.add_argument("--value", type=parse_json, required=True, metavar="JSON", help='e.g. \'{"approved": true}\'')
    resume.add_argument("--waitpoint-id", type=uuid.UUID, help="only if this is still the open wait")
    sub.add_parser("workers", help="workers that are up (idle ones too) and their live leases")
    sub.add_parser("stats", help="queue depth, in-flight per tenant, oldest pending age")
    purge = sub.add_parser("purge", help="delete finished runs and their events older than an age")
    purge.add_argument("--older-than", type=parse_duration, required=True, metavar="AGE", help="e.g. 30d, 12h, 90m")
    purge.add_argument("--dry-run", action="store_true", help="count what would be deleted, delete nothing")
    purge.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    for command in (*runs_sub.choices.values(), sub.choices["workers"], sub.choices["stats"], purge):
        command.add_argument("--json", action="store_true", help="machine-readable output")
    cli_follow.add_parser(runs_sub)
    cli_hooks.add_parsers(sub)
    cli_agents.add_parser(sub)
    cli_tenants.add_parsers(sub)
    return parser


RUN_COLUMNS = ("id", "tenant_id", "agent", "status", "attempts", "created_at", "error_code")
KEY_COLUMNS = ("id", "tenant_id", "prefix", "is_admin", "created_at", "revoked_at")


async def _operate(url: str, args: argparse.Namespace) -> int:
    """The operator commands, straight on the repository layer (admin scope: every tenant)."""
    settings = get_settings()
    engine = engine_for(url, settings, role="cli")
    queue = Queue.from_settings(engine, settings)
    try:
        if args.command in cli_hooks.COMMANDS:
            return await cli_hooks.run(queue, settings, args)
        if args.command in cli_tenants.COMMANDS:
            return await cli_tenants.run(queue, args)
        if args.command == "runs":
            if args.runs_command == "follow":
                return await cli_follow.follow_database(queue, args)
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
                "resume": lambda: _resume(queue, args),
            }[args.runs_command]
            run = await action()
            if args.json:
                print_json(run)
            else:
                print_table([dataclasses.asdict(run)], (*RUN_COLUMNS, "locked_by", "error_message"))
                print(f"\nusage: {describe_usage(run.usage)}")
            return 0
        if args.command == "workers":
            workers = await queue.list_workers()
            if args.json:
                print_json(workers)
            else:
                print_table([_worker_row(w) for w in workers], ("worker", "slots", "version", "started_at", "last_beat_at"))
                print()
                rows = [{"worker": w.worker_id, **lease} for w in workers for lease in w.leases]
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
                print("\nusage in the last 24 h:")
                print_table([{"tenant": t, **u.as_dict()} for t, u in stats.usage_last_24h.items()], ("tenant", *Usage._fields))
            return 0
        if args.command == "purge":
            return await _purge(queue, args)
    finally:
        await engine.dispose()
    return 2


async def _resume(queue: Queue, args: argparse.Namespace) -> Run:
    resumed = await queue.resume(
        args.run_id, tenant_id=None, value=redact_data(args.value), waitpoint_id=args.waitpoint_id
    )
    return resumed.run


def _worker_row(worker: WorkerView) -> dict[str, object]:
    """Slots as ``in use/total``; ``-`` for a worker that holds leases but is not registered."""
    slots = f"{worker.slots_in_use}/{worker.slots}" if worker.slots is not None else None
    return {"worker": worker.worker_id, "slots": slots, "version": worker.version,
            "started_at": worker.started_at, "last_beat_at": worker.last_beat_at}


async def _purge(queue: Queue, args: argparse.Namespace) -> int:
    """Count first, so --dry-run, the confirmation and the progress all know the total."""
    due = await queue.count_purgeable(older_than_s=args.older_than)
    if args.dry_run:
        if args.json:
            print_json({"would_purge": due})
        else:
            print(f"would purge {due} finished runs older than {args.older_than:g} s (nothing deleted)")
        return 0
    if due and not args.yes:
        if not sys.stdin.isatty():
            print(f"runq: purge would delete {due} runs; pass --yes to confirm", file=sys.stderr)
            return 1
        answer = await asyncio.to_thread(input, f"Delete {due} finished runs and their events? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing deleted", file=sys.stderr)
            return 1
    total = 0
    # whole days past the age go by partition first; what is left, row by row
    await queue.rehome_unfinished()
    await queue.drop_expired_partitions(older_than_s=args.older_than)
    while deleted := await queue.purge_finished(older_than_s=args.older_than, everywhere=True):
        total += deleted
        print(f"\rpurged {total} of {due} runs", end="", file=sys.stderr, flush=True)
    if total:
        print(file=sys.stderr)
    print_json({"purged": total}) if args.json else print(f"purged {total} runs")
    return 0


def _keys(url: str, args: argparse.Namespace) -> int:
    from app.api.keys import create_key, list_keys, revoke_key

    if args.keys_command == "create":
        key = asyncio.run(create_key(url, tenant_id=args.tenant, admin=args.admin))
        print_json({"key": key}) if args.json else print(key)
        return 0
    keys = [asyncio.run(revoke_key(url, args.key))] if args.keys_command == "revoke" else asyncio.run(list_keys(url, tenant_id=args.tenant))
    print_json(keys) if args.json else print_table([dataclasses.asdict(k) for k in keys], KEY_COLUMNS)
    return 0


def _run(args: argparse.Namespace, settings: Settings) -> int:
    from app.db.runtime import database

    if args.command == "agents":  # no database: what this configuration would load
        return cli_agents.run(settings, args)
    if args.command in ("api", "worker"):
        from app.agents.registry import start_agents
        from app.devmodel.endpoint import adopt_advertised_model

        adopt_advertised_model(settings)  # beside `runq dev`, its development model
        start_agents(settings)
    if args.command == "dev":
        from app.cli.dev import run_dev

        return run_dev(settings, host=args.host, port=args.port, concurrency=args.concurrency)

    with database(settings, create=args.command == "migrate", command=f"runq {args.command}") as url:
        if args.command == "migrate":
            from app.db.migrate import upgrade

            # DDL and Alembic's own statements on the direct session, never through a pooler
            applied = upgrade(settings.listen_database_url or url)
            for line in applied:
                print(f"applied {line}")
            print(f"the database is up to date ({len(applied)} migrations applied)")
            return 0
        if args.command == "api":
            from app.api.server import serve

            serve(settings, database_url=url, host=args.host, port=args.port)
            return 0
        if args.command == "worker":
            from app.worker.main import run_worker

            return run_worker(settings, database_url=url, concurrency=args.concurrency)
        if args.command == "keys":
            return _keys(url, args)
        return asyncio.run(_operate(url, args))


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "runs" and args.runs_command == "follow":
            if problem := cli_follow.validate(args):
                print(f"runq: {problem}", file=sys.stderr)
                return 1
            if cli_follow.over_api(args):  # a client of the API: no database
                from app.db.runtime import advertised_api

                url = args.url or advertised_api(get_settings()) or cli_follow.DEFAULT_URL
                return cli_follow.follow_api(args, url)
        return _run(args, get_settings())
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if args.debug:
            raise
        print(f"runq: {describe_error(exc)}", file=sys.stderr)
        return 1

