"""What the framework adapters' sections share (``frameworks-pydantic-ai``,
``frameworks-openai-agents``): a fake model server that answers from the request alone, a worker
on this process's loop, and the arithmetic that turns three shapes of run into a time per model
step and per tool step, bare and through runq, plus the replay after a crash.

Three shapes of run give each side's time per model request (``m``) and per tool call (``t``):
an answer (1 request), one request calling K tools then an answer (2 requests, K tools), and K
requests calling one tool each then an answer (K+1 requests, K tools). ``T = c + m·M + t·K``, so
``m = (T3 - T2) / (K - 1)`` and ``t = (T2 - T1 - m) / K``; the ratios are runq's over bare's.
A runq run is timed from its ``run.started`` to its ``run.completed`` (the database's clock), so
claiming is not in it. Then the replay: a run of N model requests (50; 6 in the smoke profile)
fails at its last tool call on the first attempt; the second replays the N - 2 recorded requests
and tool results before it from the ledger and goes live from there; its replay is
``run.started`` → its first event, against the first attempt's time to the same point.

Each side is measured with one run at a time and with ``concurrency`` runs at once (each
run's own time, medians), and the overhead runq adds per step is given in ms beside the ratio,
next to the latency of one commit measured on the same server in the same run (one client,
``INSERT`` then commit): a durable step costs at least that, and should cost little more.

The model server answers from the request alone (no script): while the conversation has fewer
tool results than the prompt asks for, a call of ``step`` (``parallel`` of them at once when the
prompt says so), then an answer, streamed as chat.completion.chunk SSE in a few chunks, with
usage.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import asyncpg
from sqlalchemy import text

from app.db.engine import create_engine
from app.db.url import asyncpg_dsn
from app.devmodel.wire import Answer, Chunks, ToolCall
from app.domain import Status
from app.queue import NewRun, Queue
from app.settings import Settings
from app.worker.main import serve
from bench.server import BenchServer

Events = list[tuple[str, int, datetime]]


def prompt(tools: int, *, parallel: bool) -> str:
    return json.dumps({"tools": tools, "parallel": parallel})


def failing_step(input: Mapping[str, Any], attempt: int) -> int:
    """The ``step`` call that fails in this attempt of a run (``-1``: none): the replay's first
    attempt stops at its ``fail_at``."""
    return int(input.get("fail_at", -1)) if attempt == 1 else -1


# -- the model server -------------------------------------------------------------------------


def _reply(body: dict[str, Any]) -> Answer:
    messages = body["messages"]
    ask = json.loads(next(m["content"] for m in messages if m["role"] == "user"))
    done = sum(1 for m in messages if m["role"] == "tool")
    if done >= ask["tools"]:
        return Answer(text=f"finished {done} steps", usage=(10, 5), piece=8)
    count = ask["tools"] - done if ask["parallel"] else 1
    steps = [ToolCall(f"call_{done + i}", "step", {"i": done + i}) for i in range(count)]
    return Answer(tool_calls=steps, usage=(10, 5), piece=1 << 20)  # arguments in one chunk


def _sse(answer: Answer) -> bytes:
    return b"".join(Chunks("bench", chunk_id="chatcmpl-bench", created=0).all(answer, include_usage=True))


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    task = asyncio.current_task()
    assert task is not None
    _clients[task] = writer
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0
            )
            body = _sse(_reply(json.loads(await reader.readexactly(length))))
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        del _clients[task]
        writer.close()


_clients: dict[asyncio.Task[None], asyncio.StreamWriter] = {}  # connection handlers still open


@asynccontextmanager
async def model_server() -> AsyncIterator[str]:
    server = await asyncio.start_server(_handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        try:
            yield f"http://127.0.0.1:{port}/v1"
        finally:  # the clients' kept-alive connections: their handlers end on EOF
            handlers = list(_clients)
            for writer in _clients.values():
                writer.close()
            await asyncio.gather(*handlers, return_exceptions=True)


# -- through runq -----------------------------------------------------------------------------


@asynccontextmanager
async def worker(url: str, *, agent: str, target: str, concurrency: int) -> AsyncIterator[Queue]:
    """A worker on this loop running ``agent`` (``module:Class``), ``concurrency`` runs at once."""
    # The claim loop and the webhook sender poll at their default pace (a second), as deployed:
    # runs are picked up by their wake-up, and a faster poll only takes the loop from the runs.
    settings = Settings(
        database_url=url, agents={agent: target}, retry_base_s=0.05, retry_max_s=0.1, shutdown_grace_s=1.0,
    )  # fmt: skip
    stop = asyncio.Event()
    task = asyncio.create_task(serve(settings, database_url=url, concurrency=concurrency, stop=stop))
    engine = create_engine(url, pool_size=4)
    try:
        yield Queue(engine)
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)
        await engine.dispose()


async def through_runq(
    queue: Queue, agent: str, inputs: list[dict[str, Any]], budget: dict[str, Any] | None = None
) -> list[Events]:
    """Runs of ``agent`` for ``inputs``, created at once and waited for with one statement per
    poll; each one's events as ``(type, attempt, created_at)``."""
    new = [NewRun(tenant_id="bench", agent=agent, input=i, budget=budget or {}, max_attempts=3) for i in inputs]
    ids = [(await queue.enqueue(run))[0].id for run in new]
    deadline = time.monotonic() + 300
    while True:
        async with queue.engine.connect() as conn:
            going = (await conn.execute(text(
                "SELECT count(*) FROM agent_runs WHERE id = ANY(:ids) AND status NOT IN ('done', 'dead', 'cancelled')"
            ), {"ids": ids})).scalar_one()
        if not going:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"{going} bench runs not finished in 300 s")
        await asyncio.sleep(0.02)
    out = []
    for run_id in ids:
        finished = await queue.get_run(run_id, tenant_id=None)
        if finished.status is not Status.DONE:
            raise RuntimeError(f"bench run ended {finished.status}: {finished.error_code} {finished.error_message}")
        out.append([(e.type, e.attempt, e.created_at) for e in await queue.read_events(run_id, limit=10_000)])
    return out


async def commit_ms(url: str, *, commits: int = 500) -> float:
    """One client's commit on this server: an ``INSERT`` and its commit (WAL flush), median ms.

    A table of its own, logged: a temporary table's rows skip the WAL, so its commits flush
    nothing and say nothing of a durable step's price."""
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        await conn.execute("DROP TABLE IF EXISTS bench_commit; CREATE TABLE bench_commit (x int)")
        took = []
        for _ in range(commits):
            started = time.perf_counter()
            await conn.execute("INSERT INTO bench_commit VALUES (1)")
            took.append(time.perf_counter() - started)
        await conn.execute("DROP TABLE bench_commit")
    finally:
        await conn.close()
    return statistics.median(took) * 1000


def _started_to_completed(events: Events) -> float:
    started = next(at for type, _, at in events if type == "run.started")
    completed = next(at for type, _, at in events if type == "run.completed")
    return (completed - started).total_seconds()


def _per_step(t1: float, t2: float, t3: float, tools: int) -> tuple[float, float]:
    model = (t3 - t2) / (tools - 1)
    return model, (t2 - t1 - model) / tools


# -- the measurement --------------------------------------------------------------------------


async def _sides(
    bare: Callable[[str], Awaitable[float]], queue: Queue, agent: str, shapes: dict[str, str], *,
    rounds: int, tools: int, concurrency: int,
) -> dict[str, Any]:  # fmt: skip
    """Per-step times of both sides with ``concurrency`` runs of a shape at once."""
    times: dict[str, dict[str, list[float]]] = {side: {name: [] for name in shapes} for side in ("bare", "runq")}
    for _ in range(rounds):
        for name, said in shapes.items():  # alternated, so both see the same drift
            times["bare"][name] += await asyncio.gather(*(bare(said) for _ in range(concurrency)))
            done = await through_runq(queue, agent, [{"prompt": said}] * concurrency)
            times["runq"][name] += [_started_to_completed(events) for events in done]
    medians = {side: {name: statistics.median(v) for name, v in values.items()} for side, values in times.items()}
    per = {side: _per_step(m["answer"], m["parallel"], m["sequential"], tools) for side, m in medians.items()}
    return {
        "bare_ms": {name: round(v * 1000, 2) for name, v in medians["bare"].items()},
        "runq_ms": {name: round(v * 1000, 2) for name, v in medians["runq"].items()},
        "per_model_step_ms": {"bare": round(per["bare"][0] * 1000, 2), "runq": round(per["runq"][0] * 1000, 2)},
        "per_tool_step_ms": {"bare": round(per["bare"][1] * 1000, 2), "runq": round(per["runq"][1] * 1000, 2)},
        # what runq adds to a step, in ms: the figure a durable step's price is stated in
        "overhead_model_step_ms": round((per["runq"][0] - per["bare"][0]) * 1000, 2),
        "overhead_tool_step_ms": round((per["runq"][1] - per["bare"][1]) * 1000, 2),
        # with runs at once, each run's step waits for the others' (2 cores): the machine's time
        # per step is a run's step time over the runs, and so is what runq adds to it
        "overhead_model_step_share_ms": round((per["runq"][0] - per["bare"][0]) * 1000 / concurrency, 2),
        "overhead_tool_step_share_ms": round((per["runq"][1] - per["bare"][1]) * 1000 / concurrency, 2),
        "ratio_model_step": round(per["runq"][0] / per["bare"][0], 2) if per["bare"][0] > 0 else None,
        "ratio_tool_step": round(per["runq"][1] / per["bare"][1], 2) if per["bare"][1] > 0 else None,
    }


async def overhead_and_replay(
    bare: Callable[[str], Awaitable[float]], url: str, queue: Queue, agent: str, *,
    rounds: int, tools: int, concurrency: int, replay_steps: int,
) -> dict[str, Any]:  # fmt: skip
    """``bare(prompt)`` (seconds per run) against ``agent`` through runq on ``queue``, one run at
    a time and ``concurrency`` at once; then the replay and one client's commit on ``url``."""
    shapes = {"answer": prompt(0, parallel=False), "parallel": prompt(tools, parallel=True), "sequential": prompt(tools, parallel=False)}
    await bare(shapes["answer"])  # warm both sides: imports, connections
    await through_runq(queue, agent, [{"prompt": shapes["answer"]}])
    one = await _sides(bare, queue, agent, shapes, rounds=rounds, tools=tools, concurrency=1)
    many = await _sides(bare, queue, agent, shapes, rounds=max(1, rounds // 5), tools=tools, concurrency=concurrency)
    replay = await _replay(queue, agent, replay_steps)
    commit = await commit_ms(url)
    return {
        "agent_steps": {"tools_per_shape": tools, "rounds": rounds},
        **one,
        "concurrent": {"runs": concurrency, **many},
        "commit_ms": round(commit, 3),
        "replay": replay,
    }


async def _replay(queue: Queue, agent: str, requests: int) -> dict[str, Any]:
    """A run of ``requests`` model requests that fails at its last tool call on attempt 1: how
    long attempt 2 takes to replay the recorded requests and tool results before it, against
    attempt 1's time to that point."""
    fail_at = requests - 2  # 0-based: the last call, after requests - 1 model requests
    input = {"prompt": prompt(requests - 1, parallel=False), "fail_at": fail_at}
    (events,) = await through_runq(queue, agent, [input], {"max_turns": requests + 1})  # the SDK's default is 10
    started = {attempt: at for type, attempt, at in events if type == "run.started"}
    calls = {attempt: [at for type, a, at in events if type == "tool.call" and a == attempt] for attempt in (1, 2)}
    # the tool call that failed is attempt 1's last and attempt 2's first event: the first step
    # attempt 2 runs live, after replaying every request up to it and every tool result before it
    live = (calls[1][fail_at] - started[1]).total_seconds()
    replayed = (calls[2][0] - started[2]).total_seconds()
    steps = 2 * fail_at + 1
    return {
        "model_requests": requests,
        "failed_at_tool": fail_at + 1,
        "replayed_steps": steps,
        "first_attempt_to_step_ms": round(live * 1000, 1),
        "replay_ms": round(replayed * 1000, 1),
        "replay_per_step_ms": round(replayed * 1000 / steps, 3),
        "ratio_replay_to_live": round(replayed / live, 3),
    }


@asynccontextmanager
async def running(
    server: BenchServer, name: str, *, agent: str, target: str, concurrency: int
) -> AsyncIterator[tuple[str, str, Queue]]:
    """A database of its own (its URL), the model server (its URL) and a worker running ``agent``."""
    async with server.database(name) as url, model_server() as base_url, \
            worker(url, agent=agent, target=target, concurrency=concurrency) as queue:  # fmt: skip
        yield url, base_url, queue
