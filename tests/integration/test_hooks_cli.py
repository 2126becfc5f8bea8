"""`runq webhooks secret`, `runq schedules list|pause|resume|delete` and `runq threads list|show`,
as an operator runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from app.cron import Timing
from app.domain import Finish
from app.guards.signing import TenantSecrets
from app.queue import Ended, NewRun, Queue
from tests.api_support import SECRET


def runq(database_url: str, *args: str, secret_key: str = SECRET) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"RUNQ_DATABASE_URL": database_url, "RUNQ_SECRET_KEY": secret_key}
    return subprocess.run([sys.executable, "-m", "app.cli", *args], env=env, capture_output=True, text=True, timeout=60)


async def test_webhook_secret_is_the_one_the_api_signs_with(queue: Queue, database_url: str) -> None:
    printed = runq(database_url, "webhooks", "secret", "--tenant", "acme")
    assert printed.returncode == 0 and printed.stdout.strip().startswith("whsec_")
    assert printed.stdout.strip() == await TenantSecrets(queue, SECRET).current("acme")
    assert runq(database_url, "webhooks", "secret", "--tenant", "acme").stdout == printed.stdout
    wrong = runq(database_url, "webhooks", "secret", "--tenant", "acme", secret_key="another-key-" * 3)
    assert wrong.returncode == 1 and wrong.stderr.count("\n") == 1 and "RUNQ_SECRET_KEY" in wrong.stderr


async def test_schedules_list_pause_resume_delete(queue: Queue, database_url: str) -> None:
    schedule = await queue.create_schedule(
        tenant_id="acme", timing=Timing(cron="0 9 * * *", every_s=None).check(), agent="demo",
        input={}, budget={}, priority=0, max_attempts=3,
    )  # fmt: skip
    sid = str(schedule.id)
    listed = json.loads(runq(database_url, "schedules", "list", "--json").stdout)
    assert [(s["id"], s["cron"], s["paused"]) for s in listed] == [(sid, "0 9 * * *", False)]
    assert json.loads(runq(database_url, "schedules", "list", "--tenant", "other", "--json").stdout) == []

    assert runq(database_url, "schedules", "pause", sid).returncode == 0
    assert (await queue.get_schedule(schedule.id, tenant_id=None)).paused is True
    assert runq(database_url, "schedules", "resume", sid).returncode == 0
    assert (await queue.get_schedule(schedule.id, tenant_id=None)).paused is False
    assert runq(database_url, "schedules", "delete", sid).returncode == 0
    missing = runq(database_url, "schedules", "delete", sid)
    assert missing.returncode == 1 and "ScheduleNotFound" in missing.stderr and "Traceback" not in missing.stderr


async def test_threads_list_and_show(queue: Queue, database_url: str) -> None:
    thread, _ = await queue.create_thread(tenant_id="acme", metadata={"user": "u1"})
    run, _, _ = await queue.enqueue_in_thread(thread.id, NewRun(tenant_id="acme", agent="demo", input={}))
    claim = (await queue.claim_batch(worker_id="w1", limit=1))[0]
    said = ({"role": "user", "content": "hello there"}, {"role": "assistant", "content": "hi"})
    await queue.finish_many([Ended.encoded(run.id, claim.lease_id, Finish.done({}), (), said)])

    listed = json.loads(runq(database_url, "threads", "list", "--json").stdout)
    assert [(t["id"], t["message_count"], t["busy"]) for t in listed] == [(str(thread.id), 2, False)]
    assert json.loads(runq(database_url, "threads", "list", "--tenant", "other", "--json").stdout) == []
    shown = json.loads(runq(database_url, "threads", "show", str(thread.id), "--json").stdout)
    assert [m["message"]["content"] for m in shown["messages"]] == ["hello there", "hi"]
    assert [r["id"] for r in shown["runs"]] == [str(run.id)]
    table = runq(database_url, "threads", "show", str(thread.id)).stdout
    assert "hello there" in table and "ROLE" in table and str(run.id) in table
    missing = runq(database_url, "threads", "show", "0b7c5a1e-0000-4000-8000-000000000000")
    assert missing.returncode == 1 and "no thread with id" in missing.stderr and "Traceback" not in missing.stderr
