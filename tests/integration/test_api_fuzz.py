"""Schemathesis against the app's own OpenAPI document on a real uvicorn process (issue 9).

Every operation gets generated requests (valid and invalid) with a valid key (a tenant key, an
admin key for ``/admin``): no answer may be a 5xx, and every answer must match the document
(status code, content type, headers, body schema). Bounded: ``MAX_EXAMPLES`` per operation.
What it found once is kept below as plain regression tests.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Iterator

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import APIOperation, GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.core.result import Ok

from app.api.keys import create_key
from tests.api_support import ApiProcess

MAX_EXAMPLES = 25
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module")
def api(database_url: str) -> Iterator[ApiProcess]:
    # Webhook URLs only to the allowed host: generated host names are never resolved (no DNS).
    process = ApiProcess(database_url, env={"RUNQ_WEBHOOK_ALLOW_HOSTS": "127.0.0.1", "RUNQ_WEBHOOK_HOSTS_ONLY": "true"})
    try:
        process.wait_ready()
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def keys(api: ApiProcess, database_url: str) -> dict[str, dict[str, str]]:
    async def make() -> dict[str, dict[str, str]]:
        tenant = await create_key(database_url, tenant_id="fuzz")
        admin = await create_key(database_url, tenant_id="fuzz-ops", admin=True)
        return {"tenant": {"Authorization": f"Bearer {tenant}"}, "admin": {"Authorization": f"Bearer {admin}"}}

    return asyncio.run(make())


@pytest.fixture(scope="module")
def run_ids(api: ApiProcess, keys: dict[str, dict[str, str]]) -> list[str]:
    """Runs of the tenant that generated requests may hit: one pending, one cancelled."""
    with httpx.Client(base_url=api.base_url, headers=keys["tenant"]) as client:
        ids = [client.post("/runs", json={"agent": "demo", "input": {"n": n}}).json()["id"] for n in range(2)]
        assert client.post(f"/runs/{ids[1]}/cancel", json={"note": "fuzz"}).status_code == 202
    return ids


@pytest.fixture(scope="module")
def schedule_ids(api: ApiProcess, keys: dict[str, dict[str, str]]) -> list[str]:
    """Schedules of the tenant that generated requests may hit."""
    with httpx.Client(base_url=api.base_url, headers=keys["tenant"]) as client:
        return [client.post("/schedules", json={"agent": "demo", "every_s": 3600 + n}).json()["id"] for n in range(2)]


@pytest.fixture(scope="module")
def thread_ids(api: ApiProcess, keys: dict[str, dict[str, str]]) -> list[str]:
    """Threads of the tenant that generated requests may hit."""
    with httpx.Client(base_url=api.base_url, headers=keys["tenant"]) as client:
        return [client.post("/threads", json={"metadata": {"n": n}}).json()["id"] for n in range(2)]


def _aimed(
    run_ids: list[str], schedule_ids: list[str], thread_ids: list[str]
) -> Callable[[schemathesis.Case, bool], schemathesis.Case]:
    """Half the valid cases are pointed at something that exists: a run, schedule or thread of
    the tenant, and the demo agent on create, so that generated values reach the database, not
    only validation."""

    def aim(case: schemathesis.Case, real: bool) -> schemathesis.Case:
        for name, ids in (("run_id", run_ids), ("schedule_id", schedule_ids), ("thread_id", thread_ids)):
            if real and name in (case.path_parameters or {}):
                case.path_parameters = {**case.path_parameters, name: ids[hash(str(case.query)) % len(ids)]}
        creates = ("/runs", "/schedules", "/threads/{thread_id}/runs")
        if real and case.method == "POST" and case.path in creates and isinstance(case.body, dict):
            case.body = {**case.body, "agent": "demo"}
        return case

    return aim


def fuzz(operation: APIOperation, mode: GenerationMode, *, base_url: str, session: requests.Session,
         headers: dict[str, str], answers: Counter[str], aim: Callable[[schemathesis.Case, bool], schemathesis.Case]) -> None:
    """``MAX_EXAMPLES`` generated requests of one operation, each answer checked."""

    strategy = operation.as_strategy(generation_mode=mode)
    if mode is GenerationMode.POSITIVE:
        strategy = st.tuples(strategy, st.booleans()).map(lambda pair: aim(*pair))

    @given(case=strategy)
    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate],
    )
    def check(case: schemathesis.Case) -> None:
        response = case.call_and_validate(base_url=base_url, session=session, headers=headers, checks=CHECKS, timeout=10)
        answers[str(response.status_code)] += 1

    check()


def test_api_conforms_to_its_openapi_document(
    api: ApiProcess, keys: dict[str, dict[str, str]], run_ids: list[str], schedule_ids: list[str], thread_ids: list[str]
) -> None:
    schema = schemathesis.openapi.from_url(f"{api.base_url}/openapi.json")
    session = requests.Session()
    failures: dict[str, str] = {}
    answers: Counter[str] = Counter()
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), f"the document does not parse: {result}"
        operation = result.ok()
        # JSON pages of events: an SSE answer on a run that exists would only end with the run.
        headers = keys["admin" if operation.path.startswith("/admin") else "tenant"] | {"Accept": "application/json"}
        # A valid AG-UI request streams until its run ends (no worker here): only invalid ones
        # (tests/integration/api/test_api_ag_ui.py streams valid ones to their end).
        modes = [GenerationMode.NEGATIVE] if operation.path.startswith("/ag-ui/") else list(GenerationMode)
        for mode in modes:
            started = time.perf_counter()
            try:
                fuzz(operation, mode, base_url=api.base_url, session=session, headers=headers, answers=answers,
                     aim=_aimed(run_ids, schedule_ids, thread_ids))
            except Unsatisfiable:
                assert mode is GenerationMode.NEGATIVE, operation.label  # no input to get wrong
            except Exception as exc:  # every operation is fuzzed; the failures are listed together
                failures[f"{operation.label} ({mode.value})"] = str(exc)[:2000]
            print(f"{operation.label} {mode.value}: {time.perf_counter() - started:.1f} s")
    print(f"schemathesis: {sum(answers.values())} calls, answers {dict(sorted(answers.items()))}")
    assert not failures, "\n\n".join(f"{k}:\n{v}" for k, v in failures.items())
    assert not any(status.startswith("5") for status in answers), answers


def test_schema_covers_every_route(api: ApiProcess) -> None:
    doc = httpx.get(f"{api.base_url}/openapi.json").json()
    assert {"/runs", "/runs/{run_id}", "/runs/{run_id}/events", "/admin/runs", "/schedules/{schedule_id}",
            "/webhook-secret", "/admin/webhooks/{delivery_id}/redeliver", "/threads/{thread_id}/runs",
            "/threads/{thread_id}/messages", "/agents", "/threads/{thread_id}/token",
            "/admin/tenants", "/admin/tenants/{tenant}/limits",
            "/ag-ui/{agent}", "/ag-ui/runs/{run_id}/events"} <= set(doc["paths"])  # fmt: skip


# -- what the fuzzing found, kept as regression tests ---------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b'{"agent": "demo", "input": {"prompt": "\\ud800"}}',
        b'{"agent": "demo", "input": {"\\udfff": 1}}',
        b'{"agent": "demo", "input": {"deep": [{"s": "ok \\ud83d"}]}}',
    ],
    ids=["value", "key", "nested"],
)
def test_lone_surrogate_in_input_is_422_not_500(api: ApiProcess, keys: dict[str, dict[str, str]], raw: bytes) -> None:
    """Valid JSON, but jsonb refuses an unpaired surrogate escape: it used to reach the INSERT."""
    response = httpx.post(f"{api.base_url}/runs", content=raw, headers=keys["tenant"] | {"Content-Type": "application/json"})
    assert (response.status_code, response.json()["code"]) == (422, "validation_error"), response.text


def test_lone_surrogate_in_cancel_note_is_422_not_500(
    api: ApiProcess, keys: dict[str, dict[str, str]], run_ids: list[str]
) -> None:
    response = httpx.post(
        f"{api.base_url}/runs/{run_ids[0]}/cancel",
        content=b'{"note": "stop \\ud800"}',
        headers=keys["tenant"] | {"Content-Type": "application/json"},
    )
    assert (response.status_code, response.json()["code"]) == (422, "validation_error"), response.text


@pytest.mark.parametrize(
    ("method", "path", "params"),
    [("GET", "/admin/tenants/a%00b", None), ("PUT", "/admin/tenants/a%00b", None), ("GET", "/admin/runs", {"tenant": "a\x00b"}),
     ("GET", "/admin/tenants/a%00b/limits", None), ("PUT", "/admin/tenants/a%00b/limits", None)],
    ids=["get-tenant", "put-tenant", "list-runs", "get-limits", "put-limits"],
)
def test_nul_in_a_tenant_name_is_4xx_not_500(
    api: ApiProcess, keys: dict[str, dict[str, str]], method: str, path: str, params: dict[str, str] | None
) -> None:
    body = {"max_inflight": 1} if method == "PUT" else None
    response = httpx.request(method, f"{api.base_url}{path}", params=params, json=body, headers=keys["admin"])
    assert 400 <= response.status_code < 500, response.text


@pytest.mark.parametrize(
    "body",
    [{"max_pending": -1}, {"create_per_s": "5"}, {"max_streams": 1.5}, {"create_burst": True},
     {"max_pending": 10**12}, {"create_per_s": 10**9}, {"bogus": 1}, [1]],
    ids=["negative", "string", "fraction", "bool", "huge", "huge-rate", "unknown-field", "not-an-object"],
)
def test_bad_tenant_limits_are_422(api: ApiProcess, keys: dict[str, dict[str, str]], body: object) -> None:
    response = httpx.put(f"{api.base_url}/admin/tenants/fuzz-limits/limits", json=body, headers=keys["admin"])
    assert (response.status_code, response.json()["code"]) == (422, "validation_error"), response.text


def test_a_bad_tenants_cursor_is_400(api: ApiProcess, keys: dict[str, dict[str, str]]) -> None:
    response = httpx.get(f"{api.base_url}/admin/tenants", params={"cursor": "%%%"}, headers=keys["admin"])
    assert (response.status_code, response.json()["code"]) == (400, "invalid_cursor"), response.text
