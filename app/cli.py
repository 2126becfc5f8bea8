"""The ``runq`` command line."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

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
    return parser


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
    return 2


if __name__ == "__main__":
    sys.exit(main())
