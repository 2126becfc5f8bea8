"""``python -m bench.failover``: install Debian's Patroni and etcd if missing, start the pair,
run runq on its host list and then behind a proxy that follows the leader, each through the
rounds (the primary SIGKILLed, then a planned switchover), and write
bench/results/failover.json and its table (as root: apt-get, and PostgreSQL runs as
``postgres``)."""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import signal
import sys
from typing import Any

from bench.failover import figures
from bench.failover.patroni import Pair, install, pair
from bench.failover.proxy import leader_proxy
from bench.failover.run import Fault, Runq, one_round, prepare, runq
from bench.procs import ROOT

RESULTS = ROOT / "bench" / "results" / "failover.json"
ROUNDS: tuple[Fault, ...] = ("kill", "switchover")


async def measure(*, synchronous: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"machine": {"python": platform.python_version()}, "synchronous": synchronous, "rounds": {}}
    with pair(synchronous=synchronous) as p:
        url = await prepare(p)
        out["url"] = url
        async with runq(url) as r:
            await rounds(p, r, "host list" if synchronous else "asynchronous standby", out["rounds"])
        if synchronous:  # the second variant: one address, a proxy that follows Patroni's leader
            async with leader_proxy(p.leader) as port, runq(f"postgresql://postgres@127.0.0.1:{port}/runq") as r:
                await rounds(p, r, "proxy", out["rounds"])
    return out


async def rounds(p: Pair, r: Runq, variant: str, into: dict[str, Any]) -> None:
    for fault in ROUNDS:
        name = f"{variant}: {fault}"
        into[name] = await one_round(p, r, fault)
        print(json.dumps({name: into[name]}), file=sys.stderr, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.failover")
    parser.add_argument(
        "--asynchronous", action="store_true",
        help="an asynchronous standby instead (host list only): what synchronous replication buys",
    )  # fmt: skip
    synchronous = not parser.parse_args().asynchronous
    install()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds through the teardown
    out = asyncio.run(measure(synchronous=synchronous))
    (RESULTS if synchronous else RESULTS.with_name("failover-asynchronous.json")).write_text(json.dumps(out, indent=2) + "\n")
    print(figures.table(out["rounds"]))
    lost = sum(len(r["acknowledged_but_lost"]) + r["seen_but_lost"] for r in out["rounds"].values())
    return 1 if lost and synchronous else 0  # asynchronous replication may lose: that is its figure


if __name__ == "__main__":
    sys.exit(main())
