"""``python -m app.worker [--concurrency N]``: one worker process, no web server."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from app.agents.registry import start_agents
from app.db.runtime import database
from app.logs import configure_logging
from app.settings import get_settings
from app.worker.main import run_worker


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m app.worker",
        description="A runq worker: claims runs from PostgreSQL and executes their agents.",
    )
    parser.add_argument("--concurrency", type=int, default=4, help="run slots (default 4)")
    args = parser.parse_args(argv)
    if args.concurrency < 1:
        parser.error("--concurrency must be at least 1")
    settings = get_settings()
    start_agents(settings)
    configure_logging(settings.log_format, settings.log_level)  # before the embedded server logs its start
    with database(settings) as url:
        return run_worker(settings, database_url=url, concurrency=args.concurrency)


if __name__ == "__main__":
    sys.exit(main())
