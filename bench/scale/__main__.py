"""``python -m bench.scale [--quick]``: build the namespaces, run the controller inside the load
generator's, tear the namespaces down whatever happens (as root: ``ip netns`` needs it)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import subprocess
import sys

from bench.procs import PYTHON, ROOT
from bench.scale.netns import topology

SECTIONS = ("herd", "drain", "partition", "sse")
FULL = {
    "apis": 4,
    "concurrency": 4,
    "idle_steps": [8, 32, 128],
    "herd_runs": 100,
    "herd_over_s": 4.0,
    "drain_runs": 10_000,
    "subscribers": 10_000,
    "sse_runs": 500,
    "sse_steps": 5,
    # Each run emits 3 events a step and the runs start spread over one step: ~1,200 frames/s
    # to the 10,000 subscribers, every second alike.
    "sse_step_s": 20.0,
    "sse_workers": 8,
    "sse_concurrency": 64,
    "partition_runs": 64,
    "cut_s": 15.0,
}
QUICK = FULL | {"idle_steps": [4, 8], "herd_runs": 20, "drain_runs": 1000, "subscribers": 400, "sse_runs": 40,
                "partition_runs": 8, "cut_s": 12.0, "sse_workers": 2, "sse_concurrency": 32}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale")
    parser.add_argument("--quick", action="store_true", help="a few workers and subscribers: a smoke run")
    parser.add_argument("--workers", type=int, help="the largest number of idle workers (default 128)")
    parser.add_argument("--worker-hosts", type=int, default=4)
    parser.add_argument("--concurrency", type=int, help="slots per worker (default 4)")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, help="some sections only (to another JSON file)")
    args = parser.parse_args()
    plan = dict(QUICK if args.quick else FULL) | {"sections": args.only or list(SECTIONS)}
    if args.concurrency:
        plan["concurrency"] = args.concurrency
    if args.workers:
        plan["idle_steps"] = [n for n in plan["idle_steps"] if n < args.workers] + [args.workers]
    roles = ["db", "load", "a1", "a2", *(f"w{n}" for n in range(1, args.worker_hosts + 1))]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds through the teardown
    with topology(roles) as net:
        spec = {"prefix": net.prefix, "hosts": {r: dataclasses.asdict(h) for r, h in net.hosts.items()}, "plan": plan}
        controller = net.hosts["load"].exec([PYTHON, "-m", "bench.scale.run", json.dumps(spec)])
        return subprocess.run(controller, cwd=ROOT, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
