"""The OpenAPI document is exact: ``schemathesis run --checks all`` (positive and negative data,
every phase) against a live server finds nothing but the business rules named below.

A business rule is a constraint JSON Schema cannot state, so a schema-valid request may still be
refused with its own problem code (never a 5xx); each is listed with the check that trips on it,
the operation and the problem code the server answers with.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import make_url

from app.api.keys import create_key
from app.db.migrate import upgrade
from tests.api_support import ApiProcess
from tests.conftest import _admin

MAX_EXAMPLES = "8"
BUSINESS_RULES = {
    # A list cursor is opaque: only a `next_cursor` the API handed out is one.
    ("positive_data_acceptance", "GET /runs", "invalid_cursor"),
    ("positive_data_acceptance", "GET /admin/runs", "invalid_cursor"),
    ("positive_data_acceptance", "GET /schedules", "invalid_cursor"),
    ("positive_data_acceptance", "GET /admin/schedules", "invalid_cursor"),
    ("positive_data_acceptance", "GET /runs/{run_id}/webhooks", "invalid_cursor"),
    ("positive_data_acceptance", "GET /admin/webhooks", "invalid_cursor"),
    ("positive_data_acceptance", "GET /admin/tenants", "invalid_cursor"),
    # A webhook URL must parse as http(s) with a host, and that host must resolve to an address
    # the SSRF guard allows (docs/webhooks.md): neither is a JSON Schema property.
    ("positive_data_acceptance", "POST /runs", "webhook_url_invalid"),
    ("positive_data_acceptance", "POST /runs", "webhook_url_unresolvable"),
    ("positive_data_acceptance", "POST /runs", "webhook_url_forbidden"),
    ("positive_data_acceptance", "POST /schedules", "webhook_url_invalid"),
    ("positive_data_acceptance", "POST /schedules", "webhook_url_unresolvable"),
    ("positive_data_acceptance", "POST /schedules", "webhook_url_forbidden"),
    # Five cron fields that cronsim accepts, exactly one of cron / every_s, and a time zone that
    # zoneinfo knows (docs/schedules.md).
    ("positive_data_acceptance", "POST /schedules", "invalid_cron"),
    ("positive_data_acceptance", "POST /schedules", "invalid_schedule"),
    ("positive_data_acceptance", "POST /schedules", "unknown_timezone"),
    ("positive_data_acceptance", "POST /schedules", "validation_error"),
    # The stateful phase follows the link from POST /schedules to the schedule routes also when
    # that create was refused (its examples name a webhook host that does not resolve here), and
    # then sends the literal id "None".
    ("positive_data_acceptance", "GET /schedules/{schedule_id}", "invalid_id"),
    ("positive_data_acceptance", "PATCH /schedules/{schedule_id}", "invalid_id"),
    ("positive_data_acceptance", "DELETE /schedules/{schedule_id}", "invalid_id"),
    # Last-Event-ID is a seq, and seqs are int4: ten digits above 2147483647 are no seq.
    ("positive_data_acceptance", "GET /runs/{run_id}/events", "invalid_cursor"),
    # jsonb cannot store NUL characters or lone surrogates, at any depth of `input`, in a note or in
    # a resume's value (their strings: the document says no NUL; lone surrogates and depth it cannot).
    ("positive_data_acceptance", "POST /runs", "validation_error"),
    ("positive_data_acceptance", "POST /runs/{run_id}/cancel", "validation_error"),
    # Cancelling a run that has already finished is a conflict by design (DESIGN §2).
    ("positive_data_acceptance", "POST /runs/{run_id}/cancel", "run_finished"),
    # Threads (docs/threads.md): cursors are opaque; a thread run's body is a run's body (its
    # webhook and jsonb rules); a prompt becomes history and has a size limit; `reject` on a busy
    # thread and deleting a busy thread are conflicts by design; the stateful phase follows the
    # link from a refused POST /threads, or from a run of no thread, with the id "None".
    ("positive_data_acceptance", "GET /threads", "invalid_cursor"),
    ("positive_data_acceptance", "GET /threads/{thread_id}/messages", "invalid_cursor"),
    ("positive_data_acceptance", "GET /threads/{thread_id}/runs", "invalid_cursor"),
    ("positive_data_acceptance", "POST /threads/{thread_id}/runs", "webhook_url_invalid"),
    ("positive_data_acceptance", "POST /threads/{thread_id}/runs", "webhook_url_unresolvable"),
    ("positive_data_acceptance", "POST /threads/{thread_id}/runs", "webhook_url_forbidden"),
    ("positive_data_acceptance", "POST /threads/{thread_id}/runs", "validation_error"),
    ("positive_data_acceptance", "POST /threads/{thread_id}/runs", "message_too_large"),
    ("positive_data_acceptance", "POST /threads/{thread_id}/runs", "thread_busy"),
    ("positive_data_acceptance", "DELETE /threads/{thread_id}", "thread_busy"),
    ("positive_data_acceptance", "GET /threads/{thread_id}", "invalid_id"),
    ("positive_data_acceptance", "GET /threads/{thread_id}/messages", "invalid_id"),
    ("positive_data_acceptance", "GET /threads/{thread_id}/runs", "invalid_id"),
    ("positive_data_acceptance", "POST /threads/{thread_id}/runs", "invalid_id"),
    ("positive_data_acceptance", "DELETE /threads/{thread_id}", "invalid_id"),
    ("positive_data_acceptance", "POST /threads/{thread_id}/token", "invalid_id"),
    # LangGraph's API (docs/langgraph-server.md): update_state needs the thread's graph, which a
    # thread has once a run of it named one (this server serves no graph), as the reference says.
    ("positive_data_acceptance", "POST /langgraph/threads/{thread_id}/state", "no_graph"),
    # A run names an assistant of a graph the server serves (this one serves none): a graph id
    # or its assistant's UUID, which the document cannot list.
    *(("positive_data_acceptance", f"POST /langgraph{path}", "unknown_assistant")
      for path in ("/runs", "/runs/batch", "/runs/stream", "/runs/wait", "/threads/{thread_id}/runs",
                   "/threads/{thread_id}/runs/stream", "/threads/{thread_id}/runs/wait", "/runs/crons",
                   "/threads/{thread_id}/runs/crons")),
    # As for runq's own thread routes, the stateful phase follows the link from a refused
    # POST /langgraph/threads with the id "None".
    *(("positive_data_acceptance", f"{method} /langgraph/threads/{{thread_id}}{tail}", "invalid_id")
      for method, tail in (("GET", ""), ("PATCH", ""), ("DELETE", ""), ("POST", "/copy"), ("GET", "/state"),
                           ("POST", "/state"), ("GET", "/state/{checkpoint_id}"), ("GET", "/history"),
                           ("POST", "/history"), ("GET", "/runs"), ("POST", "/runs"), ("POST", "/runs/stream"),
                           ("POST", "/runs/wait"), ("GET", "/runs/{run_id}"), ("GET", "/runs/{run_id}/join"),
                           ("GET", "/runs/{run_id}/stream"), ("POST", "/runs/{run_id}/cancel"),
                           ("DELETE", "/runs/{run_id}"), ("POST", "/runs/crons"))),
    # GET / PATCH / DELETE of /langgraph/threads/search (or /count) are the thread routes with the
    # id "search", as on LangGraph's own server (Starlette routes them alike): a thread id is a
    # UUID (422 invalid_id), an assistant id a UUID or a graph's name (404 for none of them); a
    # PATCH without its body is a 422. Schemathesis' undocumented-method probe meets them.
    *{
        ("unsupported_method", f"POST /langgraph/{resource}/{action}", code)
        for resource, codes in (("threads", ("invalid_id", "validation_error")),
                                ("assistants", ("not_found", "validation_error")))
        for action in ("search", "count")
        for code in codes
    },
    # Last-Event-ID is a seq of runq's event log (or -1), as on GET /runs/{run_id}/events.
    ("positive_data_acceptance", "GET /langgraph/threads/{thread_id}/runs/{run_id}/stream", "invalid_cursor"),
    ("positive_data_acceptance", "GET /langgraph/runs/{run_id}/stream", "invalid_cursor"),
    # A bulk cancel names its runs or a status: an empty body names nothing.
    ("positive_data_acceptance", "POST /langgraph/runs/cancel", "validation_error"),
    # LangGraph's crons are schedules (docs/langgraph-server.md): five cron fields cronsim accepts,
    # a time zone zoneinfo knows, the webhook rules; what schedules lack is refused with its own
    # code (on_run_completed "keep", a strategy but enqueue); a search's assistant is matched in
    # jsonb (no NUL, no lone surrogate).
    *{
        ("positive_data_acceptance", operation, code)
        for operation in ("POST /langgraph/runs/crons", "POST /langgraph/threads/{thread_id}/runs/crons",
                          "PATCH /langgraph/runs/crons/{cron_id}")
        for code in ("invalid_cron", "unknown_timezone", "cron_keep_unsupported", "cron_strategy_unsupported",
                     "webhook_url_invalid", "webhook_url_unresolvable", "webhook_url_forbidden", "validation_error")
    },
    ("positive_data_acceptance", "POST /langgraph/runs/crons/search", "validation_error"),
    ("positive_data_acceptance", "POST /langgraph/runs/crons/count", "validation_error"),
    # The AI SDK's chat (docs/frontends.md): the last of the client's UIMessages must be a user
    # message with text, or an approval response naming a waiting run of the chat; a regenerate
    # or `reject` meets a busy chat; the prompt becomes history and has a size limit.
    ("positive_data_acceptance", "POST /ai-sdk/chat", "no_user_message"),
    ("positive_data_acceptance", "POST /ai-sdk/chat", "not_waiting"),
    ("positive_data_acceptance", "POST /ai-sdk/chat", "thread_busy"),
    ("positive_data_acceptance", "POST /ai-sdk/chat", "message_too_large"),
    # A schedule's thread must be one of the tenant's (an id that names none is 404).
    ("positive_data_acceptance", "POST /schedules", "not_found"),
    # `input` must match the named agent's own input schema (GET /agents lists them); the body's
    # schema cannot tie `input` to the value of `agent`.
    ("positive_data_acceptance", "POST /runs", "invalid_input"),
    ("positive_data_acceptance", "POST /threads/{thread_id}/runs", "invalid_input"),
    ("positive_data_acceptance", "POST /schedules", "invalid_input"),
}


@pytest.fixture(scope="module")
def database_url(server_url: str) -> Iterator[str]:
    """A database of this module's own: the thousands of odd runs the fuzzer makes would
    otherwise change the planner statistics the later tests of the session run under (the
    order of runs within one claimed batch follows the plan; see the report of issue 20)."""
    name = f"runq_exact_{uuid.uuid4().hex[:10]}"
    _admin(server_url, f'CREATE DATABASE "{name}"')
    url = make_url(server_url).set(database=name).render_as_string(hide_password=False)
    upgrade(url)
    try:
        yield url
    finally:
        _admin(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def api(database_url: str) -> Iterator[ApiProcess]:
    process = ApiProcess(database_url)
    try:
        process.wait_ready()
        yield process
    finally:
        process.stop()


def schemathesis(api: ApiProcess, key: str, paths: str, report: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable, "-m", "schemathesis.cli", "run", f"{api.base_url}/openapi.json",
            "--checks", "all", "--mode", "all", "--max-examples", MAX_EXAMPLES, "--seed", "1",
            "--request-timeout", "5", "--max-time", "45", "--workers", "2", "--include-path-regex", paths, "-H", f"Authorization: Bearer {key}",
            "--report", "ndjson", "--report-ndjson-path", str(report), "--no-color",
        ],
        capture_output=True, text=True, timeout=280, cwd=report.parent,  # its cache goes there
    )  # fmt: skip


def failures(report: Path) -> set[tuple[str, str, str]]:
    """(check, operation, problem code of the answer) of every failed check in the report."""
    found = set()
    for line in report.read_text().splitlines():
        event = json.loads(line)
        recorder = event.get("ScenarioFinished", {}).get("recorder")
        if not recorder:
            continue
        for case_id, checks in recorder.get("checks", {}).items():
            for check in checks:
                if check["status"] != "failure":
                    continue
                response = recorder["interactions"].get(case_id, {}).get("response") or {}
                found.add((check["name"], check["failure_info"]["failure"]["operation"], _code(response)))
    return found


def _code(response: dict[str, object]) -> str:
    content = response.get("content")
    raw = base64.b64decode(content["$base64"]) if isinstance(content, dict) else b""
    try:
        return str(json.loads(raw).get("code", f"http_{response.get('status_code')}"))
    except (ValueError, AttributeError):
        return f"http_{response.get('status_code')}"


@pytest.mark.parametrize("role", ["tenant", "admin"])
def test_schemathesis_checks_all_find_only_business_rules(
    api: ApiProcess, database_url: str, tmp_path: Path, role: str
) -> None:
    key = asyncio.run(create_key(database_url, tenant_id=f"exact-{role}", admin=role == "admin"))
    report = tmp_path / "report.ndjson"
    # Not the AG-UI routes: a valid request streams until its run ends, and no worker runs here
    # (test_api_fuzz.py sends them invalid requests; test_api_ag_ui.py the valid ones).
    result = schemathesis(api, key, "^/admin" if role == "admin" else "^/(?!admin|ag-ui/)", report)
    found = failures(report)
    assert found <= BUSINESS_RULES, f"{sorted(found - BUSINESS_RULES)}\n{result.stdout[-6000:]}"
    assert "Test cases:" in result.stdout, result.stdout + result.stderr  # it ran
    print(result.stdout[-1500:])


def test_document_types_ids_agents_integers_and_streams(api: ApiProcess) -> None:
    doc = httpx.get(f"{api.base_url}/openapi.json").json()
    run_id = next(p for p in doc["paths"]["/runs/{run_id}"]["get"]["parameters"] if p["name"] == "run_id")
    assert run_id["schema"]["format"] == "uuid"
    schemas = doc["components"]["schemas"]
    assert schemas["CreateRun"]["properties"]["agent"]["enum"] == ["demo", "openai"]
    assert schemas["CreateRun"]["properties"]["priority"] == {
        "type": "integer", "minimum": -1000, "maximum": 1000, "title": "Priority", "default": 0,
    }  # fmt: skip
    events = doc["paths"]["/runs/{run_id}/events"]["get"]["responses"]
    assert events["200"]["content"]["text/event-stream"]["schema"] == {"$ref": "#/components/schemas/ServerSentEvent"}
    assert set(events) >= {"200", "400", "401", "404", "422", "503"}
    for path in doc["paths"].values():
        for operation in path.values():
            for status, response in operation["responses"].items():
                if status >= "400":
                    assert "application/problem+json" in response["content"], (operation["operationId"], status)


def test_integral_floats_are_integers(api: ApiProcess, database_url: str) -> None:
    """JSON Schema's integer includes 5.0; so does the API (but not 5.5 or "5")."""
    key = asyncio.run(create_key(database_url, tenant_id="exact-ints"))
    headers = {"Authorization": f"Bearer {key}"}
    created = httpx.post(f"{api.base_url}/runs", headers=headers,
                         json={"agent": "demo", "priority": 7.0, "max_attempts": 2.0, "delay_s": 3600})
    assert created.status_code == 201 and (created.json()["priority"], created.json()["max_attempts"]) == (7, 2)
    for bad in (7.5, "7", True):
        refused = httpx.post(f"{api.base_url}/runs", headers=headers, json={"agent": "demo", "priority": bad})
        assert (refused.status_code, refused.json()["code"]) == (422, "validation_error"), bad
