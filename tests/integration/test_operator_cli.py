"""`runq runs|workers|stats|purge` against a real database, as an operator runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

from sqlalchemy.engine import make_url

from app.domain import Finish, Wait, WorkerInfo
from app.queue import NewRun, Queue
from tests.conftest import _admin


def runq(database_url: str, *args: str, **env_vars: str) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"RUNQ_DATABASE_URL": database_url} | env_vars
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args], env=env, capture_output=True, text=True, timeout=60
    )


async def test_runs_workers_stats_and_purge(queue: Queue, database_url: str) -> None:
    pending, _ = await queue.enqueue(NewRun(tenant_id="acme", agent="demo", input={}))
    leased, _ = await queue.enqueue(NewRun(tenant_id="globex", agent="demo", input={}))
    await queue.claim_batch(worker_id="host:1:abc", limit=1)  # FIFO: takes `pending` first
    listed = json.loads(runq(database_url, "runs", "list", "--json").stdout)
    assert {r["id"] for r in listed} == {str(pending.id), str(leased.id)}
    table = runq(database_url, "runs", "list", "--status", "pending").stdout
    assert str(leased.id) in table and str(pending.id) not in table

    idle = WorkerInfo.start(slots=2)
    await queue.renew_leases({}, worker=idle)
    workers = {w["worker_id"]: w for w in json.loads(runq(database_url, "workers", "--json").stdout)}
    assert [lease["run_id"] for lease in workers["host:1:abc"]["leases"]] == [str(pending.id)]
    assert (workers[idle.worker_id]["slots_in_use"], workers[idle.worker_id]["slots"]) == (0, 2)
    table = runq(database_url, "workers").stdout.splitlines()
    assert any(idle.worker_id in line and " 0/2 " in line and idle.version in line for line in table)

    stats = json.loads(runq(database_url, "stats", "--json").stdout)
    assert stats["by_status"]["pending"] == 1 and stats["by_status"]["leased"] == 1
    assert stats["inflight_by_tenant"] == {"acme": 1}

    cancelled = json.loads(runq(database_url, "runs", "cancel", str(leased.id), "--json").stdout)
    assert cancelled["status"] == "cancelled" and cancelled["cancel_reason"] == "operator"
    requeued = json.loads(runq(database_url, "runs", "requeue", str(leased.id), "--json").stdout)
    assert requeued["status"] == "pending" and requeued["attempts"] == 0

    refused = runq(database_url, "runs", "requeue", str(pending.id))
    assert refused.returncode == 1 and refused.stderr == f"runq: run {pending.id} is neither dead nor cancelled, so it cannot be requeued\n"
    assert json.loads(runq(database_url, "purge", "--older-than", "30d", "--json").stdout) == {"purged": 0}
    assert runq(database_url, "purge", "--older-than", "soon").returncode == 2


async def test_stats_and_tenant_limits(queue: Queue) -> None:
    await queue.set_tenant_limit(tenant_id="acme", max_inflight=3)
    assert await queue.tenant_limit("acme") == 3
    assert await queue.tenant_limit("nobody") is None
    stats = await queue.stats()
    assert stats.by_status == {"pending": 0, "leased": 0, "waiting": 0, "done": 0, "dead": 0, "cancelled": 0}
    assert stats.oldest_pending_age_s == 0 and stats.dead_last_hour == 0


async def test_purge_counts_asks_and_reports_progress(queue: Queue, database_url: str) -> None:
    for _ in range(3):
        run, _ = await queue.enqueue(NewRun(tenant_id="acme", agent="demo", input={}))
        await queue.request_cancel(run.id, tenant_id=None, reason="operator")  # pending: cancelled now
    await queue.enqueue(NewRun(tenant_id="acme", agent="demo", input={}))  # not finished: never purged

    dry = runq(database_url, "purge", "--older-than", "0s", "--dry-run")
    assert dry.returncode == 0 and "would purge 3 finished runs" in dry.stdout
    dry_json = runq(database_url, "purge", "--older-than", "0s", "--dry-run", "--json").stdout
    assert json.loads(dry_json) == {"would_purge": 3}
    unconfirmed = runq(database_url, "purge", "--older-than", "0s")  # no terminal to ask on
    assert unconfirmed.returncode == 1
    assert unconfirmed.stderr == "runq: purge would delete 3 runs; pass --yes to confirm\n"
    assert json.loads(runq(database_url, "stats", "--json").stdout)["by_status"]["cancelled"] == 3

    purged = runq(database_url, "purge", "--older-than", "0s", "--yes")
    assert purged.returncode == 0 and purged.stdout == "purged 3 runs\n"
    assert "purged 3 of 3 runs" in purged.stderr
    stats = json.loads(runq(database_url, "stats", "--json").stdout)["by_status"]
    assert stats["cancelled"] == 0 and stats["pending"] == 1


def test_keys_list_and_revoke_never_show_a_key(database_url: str) -> None:
    key = runq(database_url, "keys", "create", "--tenant", "keys-acme").stdout.strip()
    listed = json.loads(runq(database_url, "keys", "list", "--tenant", "keys-acme", "--json").stdout)
    assert [(k["tenant_id"], k["prefix"], k["revoked_at"]) for k in listed] == [("keys-acme", key[:10], None)]
    table = runq(database_url, "keys", "list").stdout
    assert key[:10] in table and key not in table

    revoked = json.loads(runq(database_url, "keys", "revoke", listed[0]["id"], "--json").stdout)
    assert revoked[0]["id"] == listed[0]["id"] and revoked[0]["revoked_at"] is not None
    again = runq(database_url, "keys", "revoke", key[:10])  # by prefix; revoking twice is harmless
    assert again.returncode == 0 and key not in again.stdout
    unknown = runq(database_url, "keys", "revoke", "rq_nothing")
    assert (unknown.returncode, unknown.stderr) == (1, "runq: no API key with id or prefix 'rq_nothing'\n")


def test_errors_are_one_line_without_a_traceback(database_url: str) -> None:
    missing = runq(database_url, "runs", "show", "00000000-0000-4000-8000-000000000000")
    assert (missing.returncode, missing.stderr) == (1, "runq: no run with id 00000000-0000-4000-8000-000000000000\n")
    bad = runq(database_url, "stats", RUNQ_HEARTBEAT_S="60")
    assert bad.returncode == 1
    assert bad.stderr == "runq: configuration error: RUNQ_HEARTBEAT_S must be shorter than RUNQ_LEASE_S\n"
    down = runq("postgresql://ops:s3cret-pw@127.0.0.1:9/runq", "stats")
    assert down.returncode == 1 and down.stderr.startswith("runq: cannot reach the database")
    assert len(down.stderr.splitlines()) == 1 and "s3cret" not in down.stderr
    debug = runq(database_url, "--debug", "runs", "show", "00000000-0000-4000-8000-000000000000")
    assert "Traceback" in debug.stderr and "RunNotFound" in debug.stderr


def test_migrate_says_what_it_applied(database_url: str) -> None:
    done = runq(database_url, "migrate")
    assert (done.returncode, done.stdout) == (0, "the database is up to date (0 migrations applied)\n")


def test_help_is_plain_text() -> None:
    for args in ((), ("runs",), ("keys",), ("purge",), ("dev",)):
        text = runq("postgresql://unused@127.0.0.1:9/x", *args, "--help").stdout
        assert text and "``" not in text and ":func:" not in text, text


def test_an_unmigrated_database_says_to_migrate(server_url: str) -> None:
    name = f"runq_empty_{uuid.uuid4().hex[:8]}"
    _admin(server_url, f'CREATE DATABASE "{name}"')
    try:
        empty = make_url(server_url).set(database=name).render_as_string(hide_password=False)
        result = runq(empty, "stats")
        assert (result.returncode, result.stderr) == (1, "runq: the database has no runq tables yet: run `runq migrate`\n")
    finally:
        _admin(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def test_runs_resume(queue: Queue, database_url: str) -> None:
    run, _ = await queue.enqueue(NewRun(tenant_id="acme", agent="demo", input={}))
    (claim,) = await queue.claim_batch(worker_id="host:1:abc", limit=1)
    wait = Wait(name="approval", occurrence=1, payload={"q": "deploy?"})
    await queue.finish(run_id=run.id, lease_id=claim.lease_id, finish=Finish.waiting(wait))

    bad = runq(database_url, "runs", "resume", str(run.id), "--value", "{nope")
    assert bad.returncode == 2 and "not JSON" in bad.stderr and "Traceback" not in bad.stderr
    wrong = runq(database_url, "runs", "resume", str(run.id), "--value", "1", "--waitpoint-id", str(uuid.uuid4()))
    assert wrong.returncode == 1
    assert wrong.stderr == f"runq: run {run.id} is not waiting (or that waitpoint is no longer its open one)\n"

    resumed = runq(database_url, "runs", "resume", str(run.id), "--value", '{"approved": true}', "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["status"] == "pending"
    recorded = await queue.find_waitpoint(run_id=run.id, name="approval", occurrence=1)
    assert recorded is not None and recorded.value == {"approved": True}
