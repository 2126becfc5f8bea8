"""The ``runq webhooks`` and ``runq schedules`` commands (operators: every tenant, straight on
the repository layer like ``runq runs``)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import uuid

from app.console import print_json, print_table
from app.queue import Queue
from app.settings import Settings
from app.signing import SecretUnreadable, TenantSecrets

COMMANDS = ("webhooks", "schedules")
SCHEDULE_COLUMNS = ("id", "tenant_id", "agent", "cron", "every_s", "timezone", "paused", "next_run_at", "last_run_id")


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


async def run(queue: Queue, settings: Settings, args: argparse.Namespace) -> int:
    """One of :data:`COMMANDS`; domain errors propagate to the CLI's one-line error report."""
    if args.command == "webhooks":
        try:
            print(await TenantSecrets(queue, settings.secret_key or "").current(args.tenant))
        except SecretUnreadable as exc:
            print(f"runq: {exc}", file=sys.stderr)
            return 1
        return 0
    if args.schedules_command == "list":
        found = await queue.list_schedules(tenant_id=args.tenant, limit=args.limit)
        if args.json:
            print_json(found)
        else:
            print_table([dataclasses.asdict(s) for s in found], SCHEDULE_COLUMNS)
        return 0
    if args.schedules_command == "delete":
        await queue.delete_schedule(args.schedule_id, tenant_id=None)
        print(f"deleted schedule {args.schedule_id}")
        return 0
    schedule = await queue.set_schedule_paused(
        args.schedule_id, tenant_id=None, paused=args.schedules_command == "pause"
    )
    print_table([dataclasses.asdict(schedule)], SCHEDULE_COLUMNS)
    return 0
