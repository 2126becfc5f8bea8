"""``python -m bench.failover``: install Debian's Patroni and etcd if missing, start the pair and
runq on its host list, run the rounds (the primary SIGKILLed, then a planned switchover), and
write bench/results/failover.json and its table (as root: apt-get, and PostgreSQL runs as
``postgres``)."""

from __future__ import annotations

import asyncio
import json
import platform
import signal
import sys
from typing import Any

from bench.failover import figures
from bench.failover.patroni import install, pair
from bench.failover.run import Fault, one_round, prepare, runq
from bench.procs import ROOT

RESULTS = ROOT / "bench" / "results" / "failover.json"
ROUNDS: tuple[Fault, ...] = ("kill", "switchover")


async def measure() -> dict[str, Any]:
    out: dict[str, Any] = {"machine": {"python": platform.python_version()}, "rounds": {}}
    with pair() as p:
        url = await prepare(p)
        out["url"] = url
        async with runq(url) as r:
            for fault in ROUNDS:
                out["rounds"][fault] = await one_round(p, r, fault)
                print(json.dumps(out["rounds"][fault]), file=sys.stderr, flush=True)
    return out


def main() -> int:
    install()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds through the teardown
    out = asyncio.run(measure())
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    print(figures.table(out["rounds"]))
    lost = sum(len(r["acknowledged_but_lost"]) + r["seen_but_lost"] for r in out["rounds"].values())
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
