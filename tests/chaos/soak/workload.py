"""The soak's clients and its fault injector, both recording into the :class:`History`.

Creates go through the API with an ``Idempotency-Key`` and are repeated until the API answers
(an outage answers 503, a terminated connection nothing at all): a create the client never saw
acknowledged may still have committed, and the key makes the repeat return that same run.
Cancels are repeated the same way until the API says 202 or 409 ``run_finished``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import httpx

from tests.chaos.agents import BAD_KINDS, BAD_PLACES
from tests.chaos.soak.cluster import LEASE_S, SoakCluster
from tests.chaos.soak.history import History

RETRY_S = 0.2
FAULT_KINDS = ("worker_sigkill", "worker_sigstop", "backend_terminate", "postgres_restart")


def run_body(rng: random.Random, i: int) -> tuple[dict[str, Any], bool]:
    """A run of the mix, and whether the soak will try to cancel it while it runs: demo runs,
    and a few that hand runq a value it cannot store (they must fail alone, at once)."""
    if rng.random() < 0.03:
        bad = {"kind": rng.choice(BAD_KINDS), "place": rng.choice(BAD_PLACES)}
        return {"agent": "baddata", "input": bad, "max_attempts": 10}, False
    cancel = rng.random() < 0.06
    demo: dict[str, Any] = {
        "prompt": rng.choice(["", "", "soak run number " + str(i)]),
        "steps": rng.randint(0, 3),
        "step_s": rng.choice([0.0, 0.01, 0.03, 0.05]),
    }
    max_attempts = 10
    roll = rng.random()
    if cancel:
        demo |= {"steps": 3, "step_s": 0.3}  # long enough to be caught running
    elif roll < 0.12:
        demo["fail_attempts"] = rng.randint(1, 2)
    elif roll < 0.15:
        demo["fatal"] = True
    elif roll < 0.20:
        max_attempts = rng.randint(1, 2)  # retries used up: legitimately dead
        demo["fail_attempts"] = max_attempts
    elif roll < 0.30:
        demo["effect"] = f"charge-{i}"
    elif roll < 0.31:
        demo["shell"] = "echo soak"
    elif roll < 0.37:
        demo["wait"] = "soak"  # the soak resumes it (Clients.resume_when_waiting)
    elif roll < 0.39:
        demo |= {"wait": "soak", "wait_timeout_s": 0.3}  # nobody answers: the reaper times it out
    body = {"agent": "demo", "input": demo, "max_attempts": max_attempts, "priority": rng.randint(-3, 3)}
    return body, cancel


@dataclass
class Clients:
    """One HTTP client per API process; requests alternate between them."""

    apis: Sequence[httpx.AsyncClient]
    headers: dict[str, str]
    history: History
    deadline: float
    answers: Counter[str] = field(default_factory=Counter)

    async def _call(self, n: int, method: str, path: str, **kwargs: Any) -> httpx.Response | None:
        client = self.apis[n % len(self.apis)]
        try:
            response = await client.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            self.answers[type(exc).__name__] += 1
            return None
        self.answers[str(response.status_code)] += 1
        if response.status_code >= 500 and response.status_code != 503:
            self.history.record("api_error", method=method, path=path, status=response.status_code, body=response.text[:500])
        return response

    async def create(self, i: int, body: dict[str, Any]) -> str:
        key = f"soak-{i}"
        headers = self.headers | {"Idempotency-Key": key}
        for tries in range(1, 10_000):
            response = await self._call(i + tries, "POST", "/runs", json=body, headers=headers)
            if response is not None and response.status_code in (200, 201):
                run_id = str(response.json()["id"])
                self.history.created(run_id, key=key, input=body["input"], max_attempts=body["max_attempts"], tries=tries)
                return run_id
            if response is not None and response.status_code < 500:
                raise AssertionError(f"create {key} answered {response.status_code}: {response.text}")
            if time.monotonic() > self.deadline:
                raise AssertionError(f"create {key} not acknowledged before the deadline")
            await asyncio.sleep(RETRY_S)
        raise AssertionError("unreachable")

    async def resume_when_waiting(self, run_id: str, value: Any) -> None:
        """Once the run waits, resume it with ``value``, retrying what got no answer."""
        point = None
        while point is None:
            seen = await self._call(0, "GET", f"/runs/{run_id}", headers=self.headers)
            if seen is not None and seen.status_code == 200 and seen.json()["status"] == "waiting":
                point = seen.json()["waitpoint"]["waitpoint_id"]
            elif time.monotonic() > self.deadline:
                raise AssertionError(f"run {run_id} did not wait before the deadline")
            else:
                await asyncio.sleep(RETRY_S)
        body = {"waitpoint_id": point, "value": value}
        for tries in range(1, 10_000):
            response = await self._call(tries, "POST", f"/runs/{run_id}/resume", json=body, headers=self.headers)
            if response is not None and response.status_code in (202, 409):
                self.history.resumed(run_id, value=value, http_status=response.status_code)
                return
            if response is not None and response.status_code < 500:
                raise AssertionError(f"resume of {run_id} answered {response.status_code}: {response.text}")
            if time.monotonic() > self.deadline:
                raise AssertionError(f"resume of {run_id} not answered before the deadline")
            await asyncio.sleep(RETRY_S)

    async def cancel_later(self, run_id: str, delay_s: float) -> None:
        """After ``delay_s``, look at the run and ask to stop it (running, usually)."""
        await asyncio.sleep(delay_s)
        seen = await self._call(0, "GET", f"/runs/{run_id}", headers=self.headers)
        status = seen.json()["status"] if seen is not None and seen.status_code == 200 else None
        self.history.cancel_sent(run_id, seen=status)
        for tries in range(1, 10_000):
            response = await self._call(tries, "POST", f"/runs/{run_id}/cancel", headers=self.headers)
            if response is not None and response.status_code == 202:
                self.history.cancel_answered(run_id, http_status=202, run_status=response.json()["status"])
                return
            if response is not None and response.status_code == 409:
                self.history.cancel_answered(run_id, http_status=409, run_status=None)
                return
            if response is not None and response.status_code < 500:
                raise AssertionError(f"cancel of {run_id} answered {response.status_code}: {response.text}")
            if time.monotonic() > self.deadline:
                raise AssertionError(f"cancel of {run_id} not answered before the deadline")
            await asyncio.sleep(RETRY_S)


class FaultInjector:
    """Injects faults at random intervals until stopped; PostgreSQL restarts once on request.

    The first faults go through every kind in a random order, so even a short soak sees each;
    at most one worker is frozen at a time, for longer than a lease (the zombie).
    """

    def __init__(self, cluster: SoakCluster, history: History, rng: random.Random, *, gap_s: tuple[float, float]) -> None:
        self.cluster = cluster
        self.history = history
        self.rng = rng
        self.gap_s = gap_s
        self.restart_now = asyncio.Event()
        self.restarted = False
        self.stopping = asyncio.Event()
        self._thawing: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        first = ["worker_sigkill", "worker_sigstop", "backend_terminate"]
        self.rng.shuffle(first)
        while not self.stopping.is_set():
            events = (self.stopping,) if self.restarted else (self.stopping, self.restart_now)
            waits = [asyncio.ensure_future(e.wait()) for e in events]
            _, pending = await asyncio.wait(waits, timeout=self.rng.uniform(*self.gap_s), return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
            if self.stopping.is_set():
                break
            if self.restart_now.is_set() and not self.restarted:
                await self.restart_database()
                continue
            kind = first[-1] if first else self.rng.choices(FAULT_KINDS[:3], weights=(3, 2, 4))[0]
            try:
                injected = await self.inject(kind)
            except (OSError, asyncpg.PostgresError) as exc:  # the injector's own connection failed
                self.history.record("fault_not_injected", kind=kind, error=repr(exc))
                continue
            if first and injected == first[-1]:
                first.pop()  # owed kinds stay owed until they happened
        await self.finish()

    async def inject(self, kind: str) -> str:
        """Inject ``kind`` (a freeze becomes a connection kill while a worker is frozen); the
        kind injected."""
        running = self.cluster.running_workers()
        if kind == "worker_sigstop" and (self.cluster.stopped or len(running) < 2):
            kind = "backend_terminate"
        if kind == "worker_sigkill":
            index = self.rng.choice(running)
            held = await self._leases_of(self.cluster.workers[index].pid)
            old, new = self.cluster.kill_and_replace(index)
            self.history.fault(kind, pid=old, replacement=new, leases_held=len(held))
        elif kind == "worker_sigstop":
            # The busiest worker: a zombie matters for the leases it holds when it freezes.
            leases = {i: await self._leases_of(self.cluster.workers[i].pid) for i in running}
            index = max(running, key=lambda i: (len(leases[i]), self.rng.random()))
            held = leases[index]
            frozen_s = LEASE_S + self.rng.uniform(0.2, 1.0)
            pid = self.cluster.freeze(index)
            self.history.fault(kind, pid=pid, frozen_s=round(frozen_s, 2), leases_held=len(held))
            task = asyncio.create_task(self._thaw_later(pid, frozen_s, held))
            self._thawing.add(task)
            task.add_done_callback(self._thawing.discard)
        elif kind == "backend_terminate":
            terminated = await self.cluster.terminate_backends(self.rng)
            self.history.fault(kind, backends=len(terminated), by_application=dict(Counter(terminated)))
        return kind

    async def _leases_of(self, pid: int) -> list[str]:
        try:
            return await self.cluster.leases_of(pid)
        except (OSError, asyncpg.PostgresError):  # the database may be restarting
            return []

    async def _thaw_later(self, pid: int, frozen_s: float, held: list[str]) -> None:
        """SIGCONT once the others have taken the zombie's leases (what makes it a zombie), or
        at the latest after a few leases; ``frozen_s`` is the least it sleeps."""
        started = time.monotonic()
        still: set[str] | None = None
        try:
            await asyncio.sleep(frozen_s)
            while time.monotonic() - started < LEASE_S * 5:
                with contextlib.suppress(OSError, asyncpg.PostgresError):  # the database may be restarting
                    still = set(held) & set(await self.cluster.leases_of(pid))
                    if not still:
                        break
                await asyncio.sleep(0.2)
        finally:
            self.cluster.thaw(pid)
        self.history.record(
            "zombie_resumed",
            pid=pid,
            frozen_s=round(time.monotonic() - started, 2),
            leases_held=len(held),
            taken_over=None if still is None else len(held) - len(still),
        )

    async def restart_database(self) -> None:
        self.restarted = True
        down_s = self.rng.uniform(0.5, 2.0)
        self.history.fault("postgres_restart", down_s=round(down_s, 2))
        started = time.monotonic()
        await self.cluster.restart_database(down_s)
        self.history.record("postgres_back", after_s=round(time.monotonic() - started, 2))

    async def finish(self) -> None:
        """Continue a frozen worker now rather than at its time, and make sure it happened."""
        for task in list(self._thawing):
            task.cancel()
        for pid in list(self.cluster.stopped):
            self.cluster.thaw(pid)
            self.history.record("zombie_resumed", pid=pid, early=True)
