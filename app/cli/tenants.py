"""``runq tenants list|limits`` (docs/limits.md): each tenant's limits and use, and setting a
tenant's own limits; straight on the repository layer, as the other operator commands."""

from __future__ import annotations

import argparse

from app.api.admin_tenants import TenantLimitsOut
from app.cli.console import print_json, print_table
from app.queue import LIMIT_NAMES, Queue

COMMANDS = ("tenants",)
COLUMNS = ("tenant_id", "create_per_s", "create_burst", "pending", "max_pending", "streams", "max_streams",
           "inflight", "max_inflight", "schedules", "max_schedules")  # fmt: skip
DEFAULT = "default"  # a limit given as this goes back to RUNQ_TENANT_*


def _limit(text: str) -> float | None:
    if text == DEFAULT:
        return None
    value = float(text)
    if value < 0 or value != value:
        raise argparse.ArgumentTypeError("a limit is a number >= 0 (0 = no limit) or 'default'")
    return value


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tenants = sub.add_parser("tenants", help="tenants' limits and what they use (docs/limits.md)")
    tenants_sub = tenants.add_subparsers(dest="tenants_command", required=True)
    listing = tenants_sub.add_parser("list", help="every tenant by name, its limits and use")
    listing.add_argument("--limit", type=int, default=200)
    limits = tenants_sub.add_parser("limits", help="show one tenant's limits, or set those named")
    limits.add_argument("tenant")
    for name in LIMIT_NAMES:
        # absent unless given, so that "default" (None) is a change and silence is none
        limits.add_argument(f"--{name.replace('_', '-')}", type=_limit, metavar="N|default", default=argparse.SUPPRESS)
    for command in tenants_sub.choices.values():
        command.add_argument("--json", action="store_true", help="machine-readable output")


async def run(queue: Queue, args: argparse.Namespace) -> int:
    if args.tenants_command == "limits":
        changes = {name: getattr(args, name) for name in LIMIT_NAMES if hasattr(args, name)}
        if changes:
            await queue.set_tenant_limits(args.tenant, _typed(changes))
        uses = await queue.tenant_use(tenant_id=args.tenant, limit=1)
    else:
        uses = await queue.tenant_use(limit=args.limit)
    views = [TenantLimitsOut.of(use, queue.limits) for use in uses]
    if args.json:
        print_json([v.model_dump(mode="json") for v in views])
    else:
        print_table([_row(v) for v in views], COLUMNS)
    return 0


def _typed(changes: dict[str, float | None]) -> dict[str, float | int | None]:
    return {name: (value if value is None or name == "create_per_s" else int(value)) for name, value in changes.items()}


def _row(view: TenantLimitsOut) -> dict[str, object]:
    limits, use = view.effective, view.use
    return {
        "tenant_id": view.tenant_id, "create_per_s": limits.create_per_s or "-",
        "create_burst": limits.create_burst or "-", "pending": use.pending,
        "max_pending": limits.max_pending or "-", "streams": use.streams, "max_streams": limits.max_streams or "-",
        "inflight": use.inflight, "max_inflight": limits.max_inflight or "-",
        "schedules": use.schedules, "max_schedules": limits.max_schedules or "-",
    }  # fmt: skip
