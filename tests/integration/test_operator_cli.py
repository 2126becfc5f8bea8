"""`runq runs|workers|stats|purge` against a real database, as an operator runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from app.queue import Queue


def runq(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"RUNQ_DATABASE_URL": database_url}
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args], env=env, capture_output=True, text=True, timeout=60
    )


async def test_runs_workers_stats_and_purge(queue: Queue, database_url: str) -> None:
    pending, _ = await queue.enqueue(tenant_id="acme", agent="demo", input={})
    leased, _ = await queue.enqueue(tenant_id="globex", agent="demo", input={})
    await queue.claim_batch(worker_id="host:1:abc", limit=1)  # FIFO: takes `pending` first
    listed = json.loads(runq(database_url, "runs", "list", "--json").stdout)
    assert {r["id"] for r in listed} == {str(pending.id), str(leased.id)}
    table = runq(database_url, "runs", "list", "--status", "pending").stdout
    assert str(leased.id) in table and str(pending.id) not in table

    workers = json.loads(runq(database_url, "workers", "--json").stdout)
    assert [lease["run_id"] for lease in workers["host:1:abc"]] == [str(pending.id)]

    stats = json.loads(runq(database_url, "stats", "--json").stdout)
    assert stats["by_status"]["pending"] == 1 and stats["by_status"]["leased"] == 1
    assert stats["inflight_by_tenant"] == {"acme": 1}

    cancelled = json.loads(runq(database_url, "runs", "cancel", str(leased.id), "--json").stdout)
    assert cancelled["status"] == "cancelled" and cancelled["cancel_reason"] == "operator"
    requeued = json.loads(runq(database_url, "runs", "requeue", str(leased.id), "--json").stdout)
    assert requeued["status"] == "pending" and requeued["attempts"] == 0

    refused = runq(database_url, "runs", "requeue", str(pending.id))
    assert refused.returncode == 1 and "NotRequeueable" in refused.stderr
    assert json.loads(runq(database_url, "purge", "--older-than", "30d", "--json").stdout) == {"purged": 0}
    assert runq(database_url, "purge", "--older-than", "soon").returncode == 2


async def test_stats_and_tenant_limits(queue: Queue) -> None:
    await queue.set_tenant_limit(tenant_id="acme", max_inflight=3)
    assert await queue.tenant_limit("acme") == 3
    assert await queue.tenant_limit("nobody") is None
    stats = await queue.stats()
    assert stats.by_status == {"pending": 0, "leased": 0, "done": 0, "dead": 0, "cancelled": 0}
    assert stats.oldest_pending_age_s == 0 and stats.dead_last_hour == 0
