"""The controller, run inside the load generator's namespace by ``python -m bench.scale``: it
starts the cluster on the hosts it is given and measures, in order, claims per created run at
8, 32 and 128 idle workers, the drain rate, the partition, and SSE at 10,000 subscribers."""

from __future__ import annotations

import asyncio
import json
import platform
import sys
import time
from typing import Any

from bench.procs import ROOT
from bench.scale.cluster import cluster, raise_fd_limit
from bench.scale.measure import claims_per_run, drain, partition, sse_fan_out
from bench.scale.netns import Host, Topology

RESULTS = ROOT / "bench" / "results" / "scale.json"


async def measure(net: Topology, plan: dict[str, Any]) -> dict[str, Any]:
    hosts = net.hosts
    api_hosts = [h for r, h in hosts.items() if r.startswith("a")]
    worker_hosts = [h for r, h in hosts.items() if r.startswith("w")]
    out: dict[str, Any] = {"plan": plan, "machine": {"cpus": _cpus(), "python": platform.python_version()}}
    started = time.monotonic()
    async with cluster(hosts["db"], api_hosts, worker_hosts, apis=plan["apis"]) as c:
        sections = plan["sections"]
        out["herd"] = []
        for idle in plan["idle_steps"]:
            await c.add_workers(idle, concurrency=plan["concurrency"])
            if "herd" in sections:
                out["herd"].append(await claims_per_run(c, runs=plan["herd_runs"], over_s=plan["herd_over_s"]))
                _progress(out["herd"][-1])
        if "drain" in sections:
            out["drain"] = await drain(c, runs=plan["drain_runs"])
            _progress(out["drain"])
        if "partition" in sections:
            out["partition"] = await partition(c, net, runs=plan["partition_runs"], cut_s=plan["cut_s"])
            _progress(out["partition"])
        if "sse" not in sections:
            return out
        # The API's fan-out, measured next to 8 worker processes of 64 slots rather than 128 of
        # 4: on one 2-core machine 128 processes' own upkeep (a heartbeat a second each) takes the
        # cores the APIs need; on real hosts they would have cores of their own.
        await c.stop_workers()
        await c.add_workers(plan["sse_workers"], concurrency=plan["sse_concurrency"])
        try:
            out["sse"] = await sse_fan_out(
                c, subscribers=plan["subscribers"], runs=plan["sse_runs"], steps=plan["sse_steps"],
                step_s=plan["sse_step_s"],
            )
        except (TimeoutError, RuntimeError) as exc:  # reported as measured, not hidden
            out["sse"] = {"failed": repr(exc)}
        _progress(out["sse"])
    out["elapsed_s"] = round(time.monotonic() - started, 1)
    return out


def _cpus() -> int:
    import os

    return os.cpu_count() or 0


def _progress(figures: dict[str, Any]) -> None:
    print(json.dumps(figures), file=sys.stderr, flush=True)


def main() -> None:
    spec = json.loads(sys.argv[1])
    net = Topology(spec["prefix"], {role: Host(**h) for role, h in spec["hosts"].items()})
    raise_fd_limit()
    out = asyncio.run(measure(net, spec["plan"]))
    partial = spec["plan"]["sections"] != ["herd", "drain", "partition", "sse"]
    (RESULTS.with_name(f"scale-{'-'.join(spec['plan']['sections'])}.json") if partial else RESULTS).write_text(
        json.dumps(out, indent=2) + "\n"
    )
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
