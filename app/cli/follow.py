"""``runq runs follow``: a run's events as they come, until its terminal event.

Two ways, the same output and the same guarantee (every event once, in seq order, resuming after
the last one printed):

- with a key (``--key`` / ``RUNQ_KEY``), as a client of a running API, from any machine that
  reaches it: ``--url`` / ``RUNQ_URL``, else the API a local ``runq dev`` advertises in its
  ``server.json``. The following itself is ``runq_client``'s stream; a runq installed without
  ``clients/python`` says how to add it;
- without a key, like the other ``runq runs`` commands: straight on the database (admin scope),
  polling the event log by seq.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
import time
import uuid
from typing import Any
from urllib.parse import urlsplit

from app.queue import Queue

DEFAULT_URL = "http://127.0.0.1:8000"
# A follower outlives an API restart: up to 30 connections in a row that bring nothing, backing
# off to 5 s between them (about a minute and a half), before it gives up. Before the first one,
# a port that refuses connections for about two seconds is reported at once: a wrong port or a
# stopped API, not a restart (an open but silent API still gets the whole back-off).
RETRIES = 30
REFUSALS = (0.25, 0.5, 1.0)  # pauses between the first connection attempts
POLL_S = 0.25  # the database path's pace: an operator's terminal, not a browser
INSTALL_HINT = "runq runs follow over the API needs the Python client: pip install -e clients/python (from a runq checkout)"


def add_parser(runs_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    follow = runs_sub.add_parser(
        "follow",
        help="print a run's events as they come until it ends",
        description="With a key (--key / RUNQ_KEY), follows the run through the API at --url "
        "(RUNQ_URL, else the API of the local `runq dev`, else "
        f"{DEFAULT_URL}); without one, reads the database like the other `runq runs` commands. "
        "Resumes after the last event printed whenever the connection drops. Exits 0 after the "
        "terminal event; 1 with the problem's code on an error.",
    )
    follow.add_argument("run_id", type=uuid.UUID)
    follow.add_argument("--after", type=int, default=0, metavar="N", help="start after seq N (default 0: all)")
    follow.add_argument("--json", action="store_true", help="one JSON object {seq, type, data} per line")
    follow.add_argument("--url", default=os.environ.get("RUNQ_URL"), help="the API (RUNQ_URL)")
    follow.add_argument("--key", default=os.environ.get("RUNQ_KEY"), help="an API key (RUNQ_KEY)")


def over_api(args: argparse.Namespace) -> bool:
    """A key means the API; without one the command reads the database as an operator."""
    return bool(args.key)


def validate(args: argparse.Namespace) -> str | None:
    return "--after must be 0 or more" if args.after < 0 else None


def follow_api(args: argparse.Namespace, url: str) -> int:
    try:
        from runq_client import Client, RetryPolicy, RunqError
    except ImportError:
        print(f"runq: {INSTALL_HINT}", file=sys.stderr)
        return 1
    if refused := _refuses_connections(url):
        print(f"runq: connection_error: {url} refuses connections ({refused}); is the API running?", file=sys.stderr)
        return 1
    try:
        with Client(url.rstrip("/"), args.key, retry=RetryPolicy(max_retries=RETRIES)) as client:
            for event in client.runs.stream(str(args.run_id), after=args.after):
                print(_line(event.seq, event.type, event.data, as_json=args.json), flush=True)
    except RunqError as exc:
        print(f"runq: {exc.code}: {exc.detail} ({url})", file=sys.stderr)
        return 1
    return 0


def _refuses_connections(url: str) -> str | None:
    """Why the API's port refused every connection of a short first round, or None once one opens."""
    parts = urlsplit(url)
    address = (parts.hostname or "127.0.0.1", parts.port or (443 if parts.scheme == "https" else 80))
    for pause in (*REFUSALS, None):
        try:
            socket.create_connection(address, timeout=5).close()
            return None
        except ConnectionRefusedError as exc:
            if pause is None:
                return exc.strerror or "connection refused"
            time.sleep(pause)
        except OSError:
            return None  # unreachable or slow: the client's own retries say more
    return None


async def follow_database(queue: Queue, args: argparse.Namespace) -> int:
    """The event log read by seq; done once the run is terminal and its last event printed."""
    after = args.after
    while True:
        run = await queue.get_run(args.run_id, tenant_id=None)
        for event in await queue.read_events(args.run_id, after=after):
            print(_line(event.seq, event.type, event.data, as_json=args.json), flush=True)
            after = event.seq
        if run.is_terminal and after >= run.last_event_seq:
            return 0
        await asyncio.sleep(POLL_S)


def _line(seq: int, type_: str, data: dict[str, Any], *, as_json: bool) -> str:
    if as_json:
        return json.dumps({"seq": seq, "type": type_, "data": data}, ensure_ascii=False)
    return f"{seq:>5}  {type_:<22} {json.dumps(data, ensure_ascii=False)}"
