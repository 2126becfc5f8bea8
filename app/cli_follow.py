"""``runq runs follow``: a run's events as they come, over the HTTP API, until its terminal event.

Unlike the other ``runq runs`` commands (operators, straight on the database) this one is a
client of a running API, with a tenant's key, and works from any machine that reaches it. The
following itself (resuming after the last seq across dropped connections, never printing an event
twice) is ``runq_client``'s stream; this module only prints it. ``runq_client`` is a distribution
of its own (``clients/python``) that ``make install`` puts next to runq; a runq installed without
it says how to add it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from typing import Any

DEFAULT_URL = "http://127.0.0.1:8000"
# A follower outlives an API restart: up to 30 connections in a row that bring nothing, backing
# off to 5 s between them (about a minute and a half), before it gives up.
RETRIES = 30
INSTALL_HINT = "runq runs follow needs the Python client: pip install -e clients/python (from a runq checkout)"


def add_parser(runs_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    follow = runs_sub.add_parser(
        "follow",
        help="print a run's events as they come until it ends (over the API, with RUNQ_KEY)",
        description="Follows the run through the API at --url (RUNQ_URL, default "
        f"{DEFAULT_URL}) with the key --key (RUNQ_KEY), resuming after the last event printed "
        "whenever the connection drops. Exits 0 after the terminal event; 1 with the problem's "
        "code on an error.",
    )
    follow.add_argument("run_id", type=uuid.UUID)
    follow.add_argument("--after", type=int, default=0, metavar="N", help="start after seq N (default 0: all)")
    follow.add_argument("--json", action="store_true", help="one JSON object {seq, type, data} per line")
    follow.add_argument("--url", default=os.environ.get("RUNQ_URL", DEFAULT_URL), help="the API (RUNQ_URL)")
    follow.add_argument("--key", default=os.environ.get("RUNQ_KEY"), help="an API key (RUNQ_KEY)")


def run(args: argparse.Namespace) -> int:
    try:
        from runq_client import Client, RetryPolicy, RunqError
    except ImportError:
        print(f"runq: {INSTALL_HINT}", file=sys.stderr)
        return 1
    if not args.key:
        print("runq: no API key: pass --key or set RUNQ_KEY (`runq keys create --tenant ...`)", file=sys.stderr)
        return 1
    if args.after < 0:
        print("runq: --after must be 0 or more", file=sys.stderr)
        return 1
    retry = RetryPolicy(max_retries=RETRIES)
    try:
        with Client(args.url.rstrip("/"), args.key, retry=retry) as client:
            for event in client.runs.stream(str(args.run_id), after=args.after):
                print(_line(event.seq, event.type, event.data, as_json=args.json), flush=True)
    except RunqError as exc:
        print(f"runq: {exc.code}: {exc.detail}", file=sys.stderr)
        return 1
    return 0


def _line(seq: int, type_: str, data: dict[str, Any], *, as_json: bool) -> str:
    if as_json:
        return json.dumps({"seq": seq, "type": type_, "data": data}, ensure_ascii=False)
    return f"{seq:>5}  {type_:<22} {json.dumps(data, ensure_ascii=False)}"
