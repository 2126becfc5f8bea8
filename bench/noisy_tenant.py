"""The noisy tenant of the limits bench (bench/limits.py), in a process of its own.

``python -m bench.noisy_tenant PORT_A PORT_B --honour|--hammer`` with the tenant's key in
``RUNQ_BENCH_NOISY_KEY``: ``NOISY_CLIENTS`` clients hammer ``POST /runs`` and as many hold an
event stream open, spread over the two APIs, until stdin closes; then it prints its counts as
JSON. A refused client waits as ``runq_client`` and ``/client.js`` do (``--honour``: the
``Retry-After``, then up to half of it again at random) or tries again at once (``--hammer``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys

from runq_client.calls import RetryPolicy

from bench.http import HttpError, connection, json_body

NOISY_CLIENTS = 16
BODY = json_body({"agent": "demo", "input": {"steps": 0}})
# A noisy stream follows a run that starts only after the bench: the stream stays open and the
# run takes no worker slot from anyone.
HELD_BODY = json_body({"agent": "demo", "input": {"steps": 0}, "delay_s": 3600})
RETRY_AFTER = {"retry-after": "1"}  # what runq answers these limits with: whole seconds, 1 here


async def noise(ports: tuple[int, int], key: str, *, honour: bool, stop: asyncio.Event) -> dict[str, int]:
    counts = {"created": 0, "refused": 0, "streams_open": 0, "streams_refused": 0}
    headers = {"Authorization": f"Bearer {key}"}
    sent = {**headers, "Content-Type": "application/json"}

    async def creates(port: int) -> None:
        async with connection("127.0.0.1", port) as conn:
            while not stop.is_set():
                status, _ = await conn.request("POST", "/runs", headers=sent, body=BODY)
                if status == 201:
                    counts["created"] += 1
                else:
                    counts["refused"] += 1
                    if honour:
                        await asyncio.sleep(RetryPolicy().delay(0, RETRY_AFTER))

    async def stream(port: int) -> None:
        async with connection("127.0.0.1", port) as conn:
            status, body = await conn.request("POST", "/runs", headers=sent, body=HELD_BODY)
        if status != 201:
            return
        run_id = json.loads(body)["id"]
        while not stop.is_set():
            try:
                async with connection("127.0.0.1", port) as conn:
                    async for _ in conn.frames(f"/runs/{run_id}/events", headers=headers):
                        counts["streams_open"] += 1
                        await stop.wait()
                        return
            except HttpError:
                counts["streams_refused"] += 1
                if honour:
                    await asyncio.sleep(RetryPolicy().delay(0, RETRY_AFTER))

    tasks = [asyncio.create_task(f(ports[i % 2])) for i in range(NOISY_CLIENTS) for f in (creates, stream)]
    await stop.wait()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return counts


async def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.noisy_tenant", description=__doc__)
    parser.add_argument("ports", type=int, nargs=2)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--honour", action="store_true")
    mode.add_argument("--hammer", action="store_true")
    args = parser.parse_args()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    async def until_stdin_closes() -> None:
        await loop.run_in_executor(None, sys.stdin.buffer.read)
        stop.set()

    watcher = asyncio.create_task(until_stdin_closes())
    counts = await noise(tuple(args.ports), os.environ["RUNQ_BENCH_NOISY_KEY"], honour=args.honour, stop=stop)
    await watcher
    print(json.dumps(counts))


if __name__ == "__main__":
    asyncio.run(main())
