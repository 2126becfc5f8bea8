"""The one redactor on the worker's whole write path: event data, tool output, the output and
error messages are stored redacted, and paths under RUNQ_REDACT_ROOTS shortened."""

from __future__ import annotations

from typing import Any

from app.agents.base import FatalError, RunContext
from app.domain import Status
from app.queue import Queue
from tests.worker_support import enqueue_demo, in_process_worker, wait_finished

OPENAI_KEY = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWx0123"
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
BEARER = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl"
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\n-----END RSA PRIVATE KEY-----"
SECRETS = (OPENAI_KEY, AWS_KEY, BEARER, "hunter2", "MIIEowIBAAKCAQEA7", "/srv/app")


class LeakyAgent:
    """Puts a secret everywhere a run can store one, then fails with one in its message."""

    async def run(self, ctx: RunContext) -> Any:
        await ctx.emit("message.delta", {"text": f"use {OPENAI_KEY} and {AWS_KEY}"})
        await ctx.emit("tool.call", {"tool_call_id": "t1", "name": "shell", "arguments": {"password": "hunter2"}})
        result = await ctx.shell(f"echo 'Authorization: Bearer {BEARER}'; printf '%s' '{PEM}'")
        await ctx.emit("tool.result", {"tool_call_id": "t1", "output": result.output, "is_error": False})
        raise FatalError(f"cannot read /srv/app/config.py: password=hunter2 for {OPENAI_KEY}")


async def test_secrets_never_reach_the_database(database_url: str, queue: Queue) -> None:
    agents = {"leaky": f"{__name__}:LeakyAgent"}
    async with in_process_worker(database_url, agents=agents, redact_roots=["/srv/app"]):
        run = await enqueue_demo(queue, agent="leaky")
        done = await wait_finished(queue, run.id)
    assert done.status is Status.DEAD and done.error_code == "fatal_error"
    assert done.error_message == "cannot read …/config.py: password=[REDACTED] for [REDACTED]"

    events = await queue.read_events(run.id)
    stored = repr([e.data for e in events])
    for secret in SECRETS:
        assert secret not in stored, secret
    data = {e.type: e.data for e in events}
    assert data["message.delta"] == {"text": "use [REDACTED] and [REDACTED]"}
    assert data["tool.call"]["arguments"] == {"password": "[REDACTED]"}
    assert "Bearer [REDACTED]" in data["tool.result"]["output"]
    assert "[REDACTED PRIVATE KEY]" in data["tool.result"]["output"]
