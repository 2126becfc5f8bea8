"""The ``runq webhooks``, ``runq schedules`` and ``runq threads`` commands (operators: every
tenant, straight on the repository layer like ``runq runs``)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import uuid
from collections.abc import Sequence
from typing import Any

from app.cli.console import print_json, print_table
from app.guards.signing import SecretUnreadable, TenantSecrets
from app.queue import Queue
from app.settings import Settings

COMMANDS = ("webhooks", "schedules", "threads")
SCHEDULE_COLUMNS = ("id", "tenant_id", "agent", "cron", "every_s", "timezone", "paused", "next_run_at", "last_run_id",
                    "error")  # fmt: skip
THREAD_COLUMNS = ("id", "tenant_id", "busy", "message_count", "last_run_id", "created_at")
MESSAGE_COLUMNS = ("index", "role", "content", "run_id")
THREAD_RUN_COLUMNS = ("turn", "id", "status", "attempts", "cancel_reason", "created_at")
MAX_SHOWN = 1000


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    webhooks = sub.add_parser("webhooks", help="webhook signing secrets")
    webhooks_sub = webhooks.add_subparsers(dest="webhooks_command", required=True)
    secret = webhooks_sub.add_parser("secret", help="print a tenant's signing secret (created on first use)")
    secret.add_argument("--tenant", required=True)

    schedules = sub.add_parser("schedules", help="recurring runs")
    schedules_sub = schedules.add_subparsers(dest="schedules_command", required=True)
    listing = schedules_sub.add_parser("list", help="newest first")
    listing.add_argument("--tenant")
    listing.add_argument("--limit", type=int, default=50)
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    for name in ("pause", "resume", "delete"):
        schedules_sub.add_parser(name).add_argument("schedule_id", type=uuid.UUID)

    threads = sub.add_parser("threads", help="conversations: their history and runs")
    threads_sub = threads.add_subparsers(dest="threads_command", required=True)
    listing = threads_sub.add_parser("list", help="newest first")
    listing.add_argument("--tenant")
    listing.add_argument("--limit", type=int, default=50)
    show = threads_sub.add_parser("show", help="one thread, its messages and its runs")
    show.add_argument("thread_id", type=uuid.UUID)
    for command in threads_sub.choices.values():
        command.add_argument("--json", action="store_true", help="machine-readable output")


async def run(queue: Queue, settings: Settings, args: argparse.Namespace) -> int:
    """One of :data:`COMMANDS`; domain errors propagate to the CLI's one-line error report."""
    if args.command == "webhooks":
        try:
            print(await TenantSecrets(queue, settings.secret_key or "").current(args.tenant))
        except SecretUnreadable as exc:
            print(f"runq: {exc}", file=sys.stderr)
            return 1
        return 0
    if args.command == "threads":
        return await _threads(queue, args)
    if args.schedules_command == "list":
        return _print_list(await queue.list_schedules(tenant_id=args.tenant, limit=args.limit), SCHEDULE_COLUMNS, args)
    if args.schedules_command == "delete":
        await queue.delete_schedule(args.schedule_id, tenant_id=None)
        print(f"deleted schedule {args.schedule_id}")
        return 0
    schedule = await queue.set_schedule_paused(
        args.schedule_id, tenant_id=None, paused=args.schedules_command == "pause"
    )
    print_table([dataclasses.asdict(schedule)], SCHEDULE_COLUMNS)
    return 0


async def _threads(queue: Queue, args: argparse.Namespace) -> int:
    if args.threads_command == "list":
        return _print_list(await queue.list_threads(tenant_id=args.tenant, limit=args.limit), THREAD_COLUMNS, args)
    thread = await queue.get_thread(args.thread_id, tenant_id=None)
    messages = await queue.thread_messages(thread.id, tenant_id=None, limit=MAX_SHOWN)
    runs = await queue.list_thread_runs(thread.id, tenant_id=None, limit=MAX_SHOWN)
    if args.json:
        print_json({"thread": thread, "messages": messages, "runs": [run for _, run in runs]})
        return 0
    print_table([dataclasses.asdict(thread)], THREAD_COLUMNS)
    print()
    print_table([{"index": m.index, "run_id": m.run_id, **m.message} for m in messages], MESSAGE_COLUMNS)
    print()
    print_table([{"turn": turn, **dataclasses.asdict(run)} for turn, run in runs], THREAD_RUN_COLUMNS)
    return 0


def _print_list(found: Sequence[Any], columns: Sequence[str], args: argparse.Namespace) -> int:
    """A ``list`` command's output: JSON with ``--json``, else a table of ``columns``."""
    if args.json:
        print_json(found)
    else:
        print_table([dataclasses.asdict(item) for item in found], columns)
    return 0
