"""The client's I/O-free parts: the SSE decoder, the stream follower, retry decisions, models."""

from __future__ import annotations

import email.utils
import importlib.metadata
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import runq_client
from runq_client.calls import RetryPolicy, problem, retry_after
from runq_client.follow import Follow
from runq_client.models import Run
from runq_client.operations import cancel_run, create_run, get_run
from runq_client.sse import ServerSentEvent, SSEDecoder

from tests.api_support import ROOT

CLIENT = ROOT / "clients" / "python"
STREAM = (
    ": ping\r\n\r\n"
    "id: 1\r\nevent: run.queued\r\ndata: {}\r\n\r\n"
    "id: 2\nevent: message.delta\ndata: {\"text\": \"grüß ✓\"}\n\n"
    "id: 3\revent: message.delta\rdata: {\"text\": \"a\\nb\"}\r\r"
    ":keep-alive\n\n"
    "id: 4\r\nevent: run.completed\r\ndata: {\"output\":\r\ndata: 1}\r\n\r\n"
).encode()
DECODED = [
    ServerSentEvent("run.queued", "{}", "1"),
    ServerSentEvent("message.delta", '{"text": "grüß ✓"}', "2"),
    ServerSentEvent("message.delta", '{"text": "a\\nb"}', "3"),
    ServerSentEvent("run.completed", '{"output":\n1}', "4"),
]


def decode(chunks: list[bytes]) -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    return [event for chunk in chunks for event in decoder.feed(chunk)]


def test_sse_decoder_handles_every_line_ending_and_skips_comments() -> None:
    assert decode([STREAM]) == DECODED
    assert decode([b"\xef\xbb\xbf" + STREAM]) == DECODED  # a BOM at the start is not a field


@pytest.mark.parametrize("cut", range(1, len(STREAM)))
def test_sse_decoder_gives_the_same_events_wherever_the_bytes_are_split(cut: int) -> None:
    """Between "\\r" and "\\n" of a CRLF, inside "ü", inside a field name: no difference."""
    assert decode([STREAM[:cut], STREAM[cut:]]) == DECODED


def test_sse_decoder_byte_by_byte() -> None:
    assert decode([bytes([b]) for b in STREAM]) == DECODED


def test_follow_resumes_after_the_last_seq_and_stops_at_the_terminal_event() -> None:
    follow = Follow("r1", 0, RetryPolicy())
    assert follow.request().params == {"after": 0}
    first = follow.feed(STREAM[: STREAM.index(b"id: 3")])
    assert [e.seq for e in first] == [1, 2] and first[1].data == {"text": "grüß ✓"}
    assert follow.dropped(httpx.ReadError("cut")) == 0.0  # it made progress: reconnect at once
    assert follow.request().params == {"after": 2}
    # The new connection replays from the cursor; an overlap (seq 2 again) is never yielded twice.
    again = follow.feed(b"id: 2\ndata: {}\n\n" + STREAM[STREAM.index(b"id: 3"):] + b"id: 5\ndata: {}\n\n")
    assert [(e.seq, e.type) for e in again] == [(3, "message.delta"), (4, "run.completed")]
    assert follow.done and follow.last_seq == 4


def test_follow_gives_up_after_max_retries_without_progress() -> None:
    follow = Follow("r1", 7, RetryPolicy(max_retries=2, backoff_s=0.01))
    for _ in range(2):
        follow.request()
        assert 0 < follow.dropped(httpx.ConnectError("refused")) <= 0.02
    follow.request()
    with pytest.raises(runq_client.RunqConnectionError):
        follow.dropped(httpx.ConnectError("refused"))
    with pytest.raises(runq_client.RunqError) as rejected:
        follow.rejected(404, {}, b'{"code": "not_found", "detail": "no such run"}')
    assert (rejected.value.status, rejected.value.code, rejected.value.detail) == (404, "not_found", "no such run")


def test_retry_rules() -> None:
    policy = RetryPolicy(max_retries=3, retry_after_jitter=0)
    create, cancel = create_run("demo", {}, {}, None), cancel_run("r", None)
    assert policy.after_status(create, 0, 500, {}) is not None  # idempotent: it carries a key
    assert policy.after_status(cancel, 0, 500, {}) is None  # may have been done: not repeated
    assert policy.after_status(cancel, 0, 503, {"retry-after": "2"}) == 2.0  # 503/429: nothing done
    assert policy.after_status(create, 0, 429, {"retry-after": "7.5"}) == 7.5
    assert policy.after_status(create, 3, 429, {}) is None  # out of retries
    assert policy.after_status(create, 0, 409, {}) is None
    assert policy.after_error(cancel, 0, httpx.ConnectError("refused")) > 0  # never sent: safe
    with pytest.raises(runq_client.RunqConnectionError):
        policy.after_error(cancel, 0, httpx.ReadError("reset"))
    assert policy.after_error(get_run("r"), 2, httpx.ReadError("reset")) > 0


def test_retry_after_reads_seconds_and_http_dates() -> None:
    assert retry_after({"retry-after": "3"}) == 3.0
    assert retry_after({}) is None and retry_after({"retry-after": "soon"}) is None
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 < (retry_after({"retry-after": later}) or 0) <= 30


def test_retry_after_is_waited_out_then_spread() -> None:
    """Clients refused together come back at different times, none before Retry-After."""
    policy = RetryPolicy()
    delays = [policy.delay(0, {"retry-after": "2"}) for _ in range(50)]
    assert all(2.0 <= d <= 3.0 for d in delays) and len(set(delays)) > 1
    assert 60.0 <= policy.delay(0, {"retry-after": "3600"}) <= 90.0  # capped, then spread
    assert RetryPolicy(retry_after_jitter=0).delay(0, {"retry-after": "2"}) == 2.0


def test_create_retries_under_one_idempotency_key() -> None:
    """Two 503s and a dropped connection, then the answer: one key for every try."""
    seen: list[str] = []
    answers = iter([503, 502, None, 201])

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["idempotency-key"])
        status = next(answers)
        if status is None:
            raise httpx.ReadError("connection reset", request=request)
        body = run_json() if status == 201 else {"code": "database_unavailable", "detail": "retry"}
        return httpx.Response(status, json=body, headers={"Retry-After": "0"})

    http = httpx.Client(base_url="http://runq.test", transport=httpx.MockTransport(handler))
    client = runq_client.Client("http://runq.test", "rq_x", http=http, retry=RetryPolicy(backoff_s=0))
    assert client.runs.create("demo", {"prompt": "hi"}).id == "0b7c0000-0000-0000-0000-000000000001"
    assert len(seen) == 4 and len(set(seen)) == 1


def test_problem_and_models() -> None:
    error = problem(422, json.dumps({"code": "unknown_agent", "detail": "no agent", "agents": ["demo"]}).encode())
    assert (error.status, error.code, error.problem["agents"]) == (422, "unknown_agent", ["demo"])
    assert problem(502, b"<html>bad gateway</html>").code == "http_502"
    run = Run.from_json(run_json() | {"future_field": 1, "waitpoint": {"waitpoint_id": "w", "name": "approval"}})
    assert run.created_at.tzinfo is not None and run.raw["future_field"] == 1
    assert run.waitpoint is not None and run.waitpoint.name == "approval" and not run.is_terminal
    with pytest.raises(runq_client.RunqError):
        Run.from_json({"id": "x"})


def run_json() -> dict[str, object]:
    return {
        "id": "0b7c0000-0000-0000-0000-000000000001", "tenant_id": "t", "agent": "demo", "status": "pending",
        "priority": 0, "attempts": 0, "max_attempts": 3, "input": {}, "budget": {}, "output": None,
        "available_at": "2026-12-01T10:00:00Z", "created_at": "2026-12-01T10:00:00.5+00:00",
        "updated_at": "2026-12-01T10:00:00Z", "last_event_seq": 1,
    }  # fmt: skip


def test_the_client_is_versioned_with_the_server() -> None:
    assert runq_client.__version__ == importlib.metadata.version("runq-client") == importlib.metadata.version("runq")


def test_the_sync_client_is_generated_from_the_async_one() -> None:
    check = subprocess.run([sys.executable, CLIENT / "scripts" / "unasync.py", "--check"], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


def test_the_client_is_mypy_strict_clean() -> None:
    mypy = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "src", "scripts"],
        cwd=CLIENT, capture_output=True, text=True,
    )
    assert mypy.returncode == 0, mypy.stdout + mypy.stderr
    assert Path(CLIENT / "src" / "runq_client" / "py.typed").exists()
