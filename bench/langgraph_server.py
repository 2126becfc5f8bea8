"""runq's ``/langgraph`` against LangGraph's own server (``langgraph dev``, in-memory), the same
graph through the same official client: a streamed run's time to its first token and to its
end, p50/p99, one run at a time and many at once; the servers' CPU per streamed token; and a
reconnect's time to the last byte.

Both serve the conformance suite's ``langgraph.json`` (tests/langgraph_server/, started as
``reference.py`` says) and run its ``chat`` graph: one node calling ``ChatOpenAI`` (streaming)
against the bench's fake model (bench/model_server.py, a process of its own), which answers
every request with ``tokens`` tokens, one every ``token_ms``. Each run is streamed by
``langgraph_sdk`` on a fresh thread (``client.runs.stream``, ``stream_mode="messages-tuple"``,
``stream_resumable=True``: the reference gives event ids only then), timed from the stream's
request. Both servers are up for the whole section (runq: one API process and one worker, on
this run's PostgreSQL; the reference: one ``langgraph dev``), each allowed ``concurrency``
runs at once, and take turns phase by phase.

CPU is read from /proc around a phase: runq's API and worker processes, the reference's
process tree; PostgreSQL's is not counted (the reference keeps everything in memory), nor the
client's or the model's. A reconnect cuts a stream after ``cut_after`` tokens and joins it
with ``client.runs.join_stream(thread_id, run_id, last_event_id=...)``, at once (the run still
streaming) and after the run has ended (all of the rest replayed); the tokens both parts saw
are checked against the whole answer.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.schema import StreamPart

from bench.api_server import running_api
from bench.http import answers_ok
from bench.procs import ROOT, children, tree_cpu_s, wait_for, wait_for_workers
from bench.server import BenchServer, free_port
from bench.stats import summary
from bench.streaming import model_server
from bench.throughput import WORKER_READY, worker_argv, worker_env
from tests.langgraph_server.reference import (
    CONFIG,
    REFERENCE_BIN,
    REFERENCE_CWD,
    REFERENCE_VENV,
    reference_argv,
    reference_ok_url,
)

GRAPH = "chat"
SERVERS = ("runq", "reference")
PROMPT: dict[str, Any] = {"messages": [{"role": "user", "content": "stream me an answer"}]}
REFERENCE_PACKAGES = ("langgraph-cli", "langgraph-api", "langgraph-runtime-inmem", "langgraph")
WARM_UP_RUNS = 2  # per server, not counted: imports, the first connection, the model's client
IDLE_S = 2.0  # each server's CPU with no run, read over this long: the floor under every phase


@dataclass
class Target:
    """One server under test: the SDK's base URL, its key (None: none) and its CPU so far."""

    name: str
    url: str
    key: str | None
    cpu_s: Callable[[], float]

    def client(self) -> LangGraphClient:
        return get_client(url=self.url, api_key=self.key)


@dataclass
class Streamed:
    """What one streamed run gave the client."""

    thread_id: str
    run_id: str
    first_token_s: float | None
    end_s: float
    tokens: int
    last_event_id: str | None


def reference_missing() -> str | None:
    """Why the reference cannot run here, or None."""
    # The rule's marker, written once pip has finished: a venv it left half-installed is missing
    if not REFERENCE_BIN.exists() or not any(REFERENCE_VENV.glob(".installed-*")):
        return (
            f"LangGraph's reference server is not installed in {REFERENCE_VENV.relative_to(ROOT)} "
            "(the Makefile's $(REF_VENV) rule, which `make bench` runs)"
        )
    return None


async def compare(
    server: BenchServer,
    *,
    runs: int,
    concurrency: int,
    rounds: int,
    reconnects: int,
    tokens: int,
    token_ms: float,
    cut_after: int,
) -> dict[str, Any]:
    """``runs`` runs one at a time, ``rounds`` of ``concurrency`` at once and ``reconnects``
    reconnects of each kind, per server, for a ``tokens``-token answer."""
    shape = {
        "graph": GRAPH,
        "tokens": tokens,
        "token_ms": token_ms,
        "runs": runs,
        "concurrency": concurrency,
        "rounds": rounds,
        "reconnects": reconnects,
        "cut_after": cut_after,
        "reference_blockbuster": "off",
    }
    missing = reference_missing()
    if missing:
        return {"shape": shape, "skipped": missing}
    out: dict[str, Any] = {"shape": shape, "reference_versions": await _reference_versions()}
    seconds = tokens * token_ms / 1000
    async with (
        server.database("langgraph_server") as url,
        model_server(per_s=1000 / token_ms, seconds=seconds) as (model_url, _model),
        AsyncExitStack() as stack,
    ):
        env = {"RUNQ_LANGGRAPH_CONFIG": str(CONFIG), "LANGGRAPH_TEST_MODEL_URL": model_url}
        targets = [
            await stack.enter_async_context(_runq(url, env, concurrency)),
            await stack.enter_async_context(_reference(env, concurrency)),
        ]
        for target in targets:
            for _ in range(WARM_UP_RUNS):
                await _expect_whole(await _stream(target.client()), tokens)
        results: dict[str, dict[str, Any]] = {t.name: {} for t in targets}
        for target in targets:
            results[target.name]["idle_cpu_ms_per_s"] = await _idle_cpu(target)
        for target in targets:
            results[target.name]["one_at_a_time"] = await _sequential(
                target, runs=runs, tokens=tokens
            )
        for target in targets:
            results[target.name]["concurrent"] = await _concurrent(
                target, concurrency=concurrency, rounds=rounds, tokens=tokens
            )
        for target in targets:
            results[target.name]["reconnect"] = await _reconnects(
                target, samples=reconnects, cut_after=cut_after, tokens=tokens
            )
    out |= results
    out["ratios"] = ratios(out)
    return out


def ratios(section: dict[str, Any]) -> dict[str, float | None]:
    """runq ÷ reference for every figure of the section (lower is better for all of them)."""
    pairs: dict[str, tuple[str, ...]] = {}
    for phase in ("one_at_a_time", "concurrent"):
        for what in ("first_token", "end"):
            for q in ("p50", "p99"):
                pairs[f"{phase}_{what}_{q}"] = (phase, what, f"{q}_ms")
        pairs[f"{phase}_cpu_per_token"] = (phase, "cpu_us_per_token")
    for kind in ("live", "after_end"):
        pairs[f"reconnect_{kind}_last_byte_p50"] = ("reconnect", kind, "p50_ms")
    out: dict[str, float | None] = {}
    for name, path in pairs.items():
        runq, reference = (_dig(section[s], path) for s in SERVERS)
        out[name] = round(runq / reference, 3) if runq is not None and reference else None
    return out


def _dig(node: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


async def _reference_versions() -> dict[str, str]:
    script = "import sys; from importlib.metadata import version; print(*(version(p) for p in sys.argv[1:]))"
    proc = await asyncio.create_subprocess_exec(
        str(REFERENCE_VENV / "bin" / "python"), "-c", script, *REFERENCE_PACKAGES,
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    stdout, _ = await proc.communicate()
    return dict(zip(REFERENCE_PACKAGES, stdout.decode().split(), strict=False))


@asynccontextmanager
async def _runq(url: str, env: dict[str, str], concurrency: int) -> AsyncIterator[Target]:
    """runq's API and one worker of ``concurrency`` slots, serving ``CONFIG``."""
    async with (
        running_api(url, **env) as api,
        children([worker_argv(concurrency)], env=worker_env(url, **env)) as procs,
    ):
        await wait_for_workers(url, 1, sessions=WORKER_READY, watch=procs)
        yield Target(
            "runq",
            f"http://127.0.0.1:{api.port}/langgraph",
            api.key,
            lambda: api.child.cpu_s() + sum(p.cpu_s() for p in procs),
        )


@asynccontextmanager
async def _reference(env: dict[str, str], concurrency: int) -> AsyncIterator[Target]:
    """``langgraph dev`` running ``concurrency`` jobs at once, serving ``CONFIG``."""
    port = free_port()
    # PYTHONPATH emptied: the reference runs from its own venv, not on runq's source tree.
    # BlockBuster off: `langgraph dev` wraps blocking calls to report them, a development check
    # whose CPU is no part of serving a run (the conformance suite keeps it on).
    env = {**env, "PYTHONPATH": "", "LANGGRAPH_ALLOW_BLOCKING": "true"}
    # Run in a copy of the graphs' folder: no state left there by the conformance suite or an
    # earlier bench, and none left for them
    home = Path(tempfile.mkdtemp(prefix="runq-bench-langgraph-dev-"))
    try:
        shutil.copytree(
            REFERENCE_CWD, home, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".langgraph_api")
        )
        argv = reference_argv(port, jobs=concurrency, config=home / CONFIG.name)
        async with children([argv], env=env, cwd=home) as (child,):
            what = f"langgraph dev at {reference_ok_url(port)}"
            await wait_for(lambda: answers_ok(port, "/ok"), timeout_s=120, what=what, every_s=0.2, watch=[child])
            yield Target(
                "reference", f"http://127.0.0.1:{port}", None, lambda: tree_cpu_s(child.proc.pid)
            )
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _token(part: StreamPart) -> bool:
    """A ``messages-tuple`` frame carrying a piece of the answer's text."""
    if part.event != "messages" or not isinstance(part.data, list) or not part.data:
        return False
    content = part.data[0].get("content") if isinstance(part.data[0], dict) else None
    return isinstance(content, str) and bool(content)


async def _stream(client: LangGraphClient, *, cut_after: int | None = None) -> Streamed:
    """One run on a fresh thread, streamed to its end (or closed after ``cut_after`` tokens)."""
    thread_id = str((await client.threads.create())["thread_id"])
    run_id = ""
    first: float | None = None
    tokens = 0
    last_id: str | None = None
    started = time.perf_counter()
    stream = cast(  # an async generator, typed as an iterator: closed below
        AsyncGenerator[StreamPart, None],
        client.runs.stream(
            thread_id,
            GRAPH,
            input=PROMPT,
            stream_mode="messages-tuple",
            stream_resumable=True,
            on_disconnect="continue",
        ),
    )
    try:
        async for part in stream:
            last_id = part.id or last_id
            if part.event == "metadata":
                run_id = str(part.data["run_id"])
            elif part.event == "error":
                raise RuntimeError(f"run {run_id}: {part.data}")
            elif _token(part):
                tokens += 1
                if first is None:
                    first = time.perf_counter() - started
                if tokens == cut_after:
                    break
    finally:
        await stream.aclose()  # a cut closes the connection here, not when collected
    return Streamed(thread_id, run_id, first, time.perf_counter() - started, tokens, last_id)


async def _expect_whole(streamed: Streamed, tokens: int) -> Streamed:
    if streamed.tokens != tokens:
        raise RuntimeError(f"run {streamed.run_id}: {streamed.tokens} tokens streamed of {tokens}")
    return streamed


async def _idle_cpu(target: Target) -> float:
    """CPU ms per second the server spends with no run (polls, heartbeats, its own loops)."""
    before = target.cpu_s()
    await asyncio.sleep(IDLE_S)
    return round((target.cpu_s() - before) * 1000 / IDLE_S, 1)


def _timings(streams: list[Streamed], cpu_s: float) -> dict[str, Any]:
    tokens = sum(s.tokens for s in streams)
    return {
        "first_token": summary([s.first_token_s for s in streams if s.first_token_s is not None]),
        "end": summary([s.end_s for s in streams]),
        "tokens": tokens,
        "cpu_s": round(cpu_s, 3),
        "cpu_us_per_token": round(cpu_s * 1e6 / tokens, 1) if tokens else None,
    }


async def _sequential(target: Target, *, runs: int, tokens: int) -> dict[str, Any]:
    client = target.client()
    before = target.cpu_s()
    streams = [await _expect_whole(await _stream(client), tokens) for _ in range(runs)]
    return _timings(streams, target.cpu_s() - before)


async def _concurrent(
    target: Target, *, concurrency: int, rounds: int, tokens: int
) -> dict[str, Any]:
    client = target.client()
    streams: list[Streamed] = []
    before = target.cpu_s()
    for _ in range(rounds):
        answers = await asyncio.gather(*(_stream(client) for _ in range(concurrency)))
        streams += [await _expect_whole(s, tokens) for s in answers]
    return _timings(streams, target.cpu_s() - before)


async def _reconnects(
    target: Target, *, samples: int, cut_after: int, tokens: int
) -> dict[str, Any]:
    """Cut after ``cut_after`` tokens, then join from the last event id: at once ("live") and
    once the run has ended ("after_end"); the time from the join's request to its last byte."""
    client = target.client()
    out: dict[str, Any] = {}
    for kind in ("live", "after_end"):
        seconds: list[float] = []
        seen: list[int] = []  # tokens of the answer the cut stream and the join gave together
        for _ in range(samples):
            cut = await _stream(client, cut_after=cut_after)
            if cut.last_event_id is None:
                raise RuntimeError(f"{target.name} gave no event id with stream_resumable=True")
            if kind == "after_end":
                await client.runs.join(cut.thread_id, cut.run_id)
            started = time.perf_counter()
            rest = 0
            async for part in client.runs.join_stream(
                cut.thread_id, cut.run_id, last_event_id=cut.last_event_id
            ):
                if part.event == "error":
                    raise RuntimeError(f"run {cut.run_id}: {part.data}")
                rest += _token(part)
            seconds.append(time.perf_counter() - started)
            seen.append(cut.tokens + rest)
        out[kind] = summary(seconds) | {
            "whole_answers": seen.count(tokens),
            "other_token_counts": [n for n in seen if n != tokens],  # < tokens: lost, >: repeated
        }
    return out
