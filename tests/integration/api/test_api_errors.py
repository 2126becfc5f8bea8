"""Every bad input answers its 4xx problem; other tenants' runs are 404; outages are 503."""

from __future__ import annotations

import base64
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.main import create_app
from app.settings import Settings
from tests.api_support import SECRET, create_run, free_port

PROBLEM_KEYS = {"type", "title", "status", "detail", "code"}


def assert_problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem: dict[str, Any] = response.json()
    assert set(problem) >= PROBLEM_KEYS
    assert (problem["status"], problem["code"]) == (status, code)
    return problem


def nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


BAD_BODIES = [
    pytest.param({"agent": "nope"}, 422, "unknown_agent", id="unknown-agent"),
    pytest.param({"input": {}}, 422, "validation_error", id="no-agent"),
    pytest.param({"agent": 5}, 422, "validation_error", id="agent-not-string"),
    pytest.param({"agent": "demo", "input": [1]}, 422, "validation_error", id="input-not-object"),
    pytest.param({"agent": "demo", "input": {"s": "a\u0000b"}}, 422, "validation_error", id="input-nul"),
    pytest.param({"agent": "demo", "input": {"k": nested(100)}}, 422, "validation_error", id="input-too-deep"),
    pytest.param({"agent": "demo", "priority": "1"}, 422, "validation_error", id="priority-string"),
    pytest.param({"agent": "demo", "priority": 1.5}, 422, "validation_error", id="priority-float"),
    pytest.param({"agent": "demo", "priority": 10**12}, 422, "validation_error", id="priority-range"),
    pytest.param({"agent": "demo", "max_attempts": 0}, 422, "validation_error", id="max-attempts-0"),
    pytest.param({"agent": "demo", "max_attempts": True}, 422, "validation_error", id="max-attempts-bool"),
    pytest.param({"agent": "demo", "delay_s": -1}, 422, "validation_error", id="delay-negative"),
    pytest.param({"agent": "demo", "on_disconnect": "stop"}, 422, "validation_error", id="on-disconnect"),
    pytest.param({"agent": "demo", "disconnect_grace_s": -0.5}, 422, "validation_error", id="grace-negative"),
    pytest.param({"agent": "demo", "budget": {"max_turns": 0}}, 422, "validation_error", id="max-turns-0"),
    pytest.param({"agent": "demo", "budget": {"max_tool_calls": -2}}, 422, "validation_error", id="tool-calls"),
    pytest.param({"agent": "demo", "budget": {"deadline_s": 0}}, 422, "validation_error", id="deadline-0"),
    pytest.param({"agent": "demo", "budget": {"tokens": 5}}, 422, "validation_error", id="budget-unknown"),
    pytest.param({"agent": "demo", "prioritty": 1}, 422, "validation_error", id="unknown-field"),
    pytest.param([1, 2], 422, "validation_error", id="body-not-object"),
]


@pytest.mark.parametrize(("body", "status", "code"), BAD_BODIES)
async def test_bad_create_bodies(
    client: httpx.AsyncClient, alice: dict[str, str], body: Any, status: int, code: str
) -> None:
    assert_problem(await client.post("/runs", json=body, headers=alice), status, code)


async def test_validation_problem_names_the_field(client: httpx.AsyncClient, alice: dict[str, str]) -> None:
    problem = assert_problem(
        await client.post("/runs", json={"agent": "demo", "budget": {"max_turns": 0}}, headers=alice),
        422,
        "validation_error",
    )
    assert problem["errors"][0]["loc"] == ["body", "budget", "max_turns"]


@pytest.mark.parametrize(
    "raw",
    [b"{bad", b'{"agent": "demo",}', b'{"agent": "demo", "input": {"x": NaN}}', b"\xff\xfe"],
    ids=["truncated", "trailing-comma", "nan", "not-utf8"],
)
async def test_malformed_json(client: httpx.AsyncClient, alice: dict[str, str], raw: bytes) -> None:
    response = await client.post("/runs", content=raw, headers=alice | {"Content-Type": "application/json"})
    assert response.status_code in (400, 422)  # NaN parses in Python's json, and is then refused
    assert response.json()["code"] in ("malformed_json", "validation_error")
    if raw != b'{"agent": "demo", "input": {"x": NaN}}':
        assert_problem(response, 400, "malformed_json")


@pytest.mark.parametrize(
    ("path", "content_type"),
    [
        ("/runs", None),
        ("/runs", "text/plain"),
        ("/runs", "application/x-www-form-urlencoded"),
        ("/threads", "multipart/form-data; boundary=x"),
        ("/runs/00000000-0000-0000-0000-000000000000/resume", "text/plain; charset=utf-8"),
    ],
)
async def test_a_body_that_is_not_json_is_415(
    client: httpx.AsyncClient, alice: dict[str, str], path: str, content_type: str | None
) -> None:
    headers = alice | ({"Content-Type": content_type} if content_type else {})
    response = await client.post(path, content=b'{"agent": "demo"}', headers=headers)
    assert_problem(response, 415, "unsupported_media_type")
    assert response.headers["accept-post"] == "application/json"


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8", "application/merge-patch+json"])
async def test_json_media_types_pass(client: httpx.AsyncClient, alice: dict[str, str], content_type: str) -> None:
    response = await client.post("/runs", content=b'{"agent": "demo"}', headers=alice | {"Content-Type": content_type})
    assert response.status_code == 201, response.text


async def test_a_route_without_a_body_needs_no_content_type(client: httpx.AsyncClient, alice: dict[str, str]) -> None:
    run = await create_run(client, alice, agent="demo")
    response = await client.post(f"/runs/{run['id']}/cancel", headers=alice)
    assert response.status_code == 202, response.text


async def test_the_document_names_415_for_every_body(client: httpx.AsyncClient) -> None:
    document = (await client.get("/openapi.json")).json()
    with_bodies = [op for path in document["paths"].values() for op in path.values() if "requestBody" in op]
    assert with_bodies and all("415" in op["responses"] for op in with_bodies)


async def test_body_too_large_by_content_length(
    client: httpx.AsyncClient, alice: dict[str, str], settings: Settings
) -> None:
    body = b'{"agent": "demo", "input": {"x": "' + b"a" * settings.max_body_bytes + b'"}}'
    assert_problem(
        await client.post("/runs", content=body, headers=alice | {"Content-Type": "application/json"}),
        413,
        "body_too_large",
    )


async def test_body_too_large_while_streaming(
    client: httpx.AsyncClient, alice: dict[str, str], settings: Settings
) -> None:
    sent = 0

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: chunked
        nonlocal sent
        for _ in range(100):
            sent += 1
            yield b" " * 16384

    response = await client.post("/runs", content=chunks(), headers=alice | {"Content-Type": "application/json"})
    assert_problem(response, 413, "body_too_large")
    assert sent * 16384 <= settings.max_body_bytes + 16384  # refused before the rest was read


async def test_bad_ids_cursors_and_params(client: httpx.AsyncClient, alice: dict[str, str]) -> None:
    run = await create_run(client, alice)
    json_headers = alice | {"Accept": "application/json"}
    cases = [
        (client.get("/runs/not-a-uuid", headers=alice), 422, "invalid_id"),
        (client.post("/runs/123/cancel", headers=alice), 422, "invalid_id"),
        (client.get("/runs/123/events", headers=alice), 422, "invalid_id"),
        (client.post("/runs/123/stream-token", headers=alice), 422, "invalid_id"),
        (client.get("/runs", params={"cursor": "garbage!"}, headers=alice), 400, "invalid_cursor"),
        (client.get("/runs", params={"cursor": base64.urlsafe_b64encode(b'["x", 1]').decode()}, headers=alice),
         400, "invalid_cursor"),
        (client.get("/runs", params={"cursor": base64.urlsafe_b64encode(b"{}").decode()}, headers=alice),
         400, "invalid_cursor"),
        (client.get("/runs", params={"limit": 0}, headers=alice), 422, "validation_error"),
        (client.get("/runs", params={"limit": "many"}, headers=alice), 422, "validation_error"),
        (client.get("/runs", params={"status": "running"}, headers=alice), 422, "validation_error"),
        (client.get(f"/runs/{run['id']}/events", params={"after": -1}, headers=json_headers), 422, "validation_error"),
        (client.get(f"/runs/{run['id']}/events", params={"after": 2**40}, headers=json_headers),
         422, "validation_error"),
        (client.get(f"/runs/{run['id']}/events", headers=alice | {"Last-Event-ID": "x"}), 400, "invalid_cursor"),
        (client.get(f"/runs/{run['id']}/events", headers=alice | {"Last-Event-ID": "99999999999"}),
         400, "invalid_cursor"),
        (client.post(f"/runs/{run['id']}/cancel", json={"note": 5}, headers=alice), 422, "validation_error"),
        (client.post("/runs", json={"agent": "demo"}, headers=alice | {"Idempotency-Key": "k" * 300}),
         422, "validation_error"),
        (client.get(f"/runs/{uuid.uuid4()}", headers=alice), 404, "not_found"),
        (client.get("/nowhere", headers=alice), 404, "not_found"),
        (client.delete("/runs", headers=alice), 405, "method_not_allowed"),
        (client.put(f"/runs/{run['id']}", headers=alice), 405, "method_not_allowed"),
    ]
    for request, status, code in cases:
        assert_problem(await request, status, code)


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer rq_unknown"}, {"Authorization": "Bearer "}, {"Authorization": "Basic dTpw"},
     {"Authorization": "rq_no_scheme"}],
    ids=["missing", "unknown", "empty", "basic", "no-scheme"],
)
async def test_unauthorized(client: httpx.AsyncClient, headers: dict[str, str]) -> None:
    for request in (
        client.get("/runs", headers=headers),
        client.post("/runs", json={"agent": "demo"}, headers=headers),
        client.get(f"/runs/{uuid.uuid4()}/events", headers=headers),
        client.get("/runs/not-a-uuid", headers=headers),  # 401 before the id is looked at
    ):
        response = await request
        assert_problem(response, 401, "unauthorized")
        assert response.headers["www-authenticate"].startswith("Bearer")


async def test_other_tenants_run_is_404_everywhere(
    client: httpx.AsyncClient, alice: dict[str, str], bob: dict[str, str]
) -> None:
    run = await create_run(client, alice)
    rid = run["id"]
    for request in (
        client.get(f"/runs/{rid}", headers=bob),
        client.post(f"/runs/{rid}/cancel", headers=bob),
        client.get(f"/runs/{rid}/events", headers=bob),
        client.get(f"/runs/{rid}/events", headers=bob | {"Accept": "application/json"}),
        client.post(f"/runs/{rid}/stream-token", headers=bob),
    ):
        assert_problem(await request, 404, "not_found")
    assert (await client.get("/runs", headers=bob)).json() == {"items": [], "next_cursor": None}
    # Alice's cursor does not reveal her runs to Bob either.
    await create_run(client, alice)
    cursor = (await client.get("/runs", params={"limit": 1}, headers=alice)).json()["next_cursor"]
    assert (await client.get("/runs", params={"cursor": cursor}, headers=bob)).json()["items"] == []
    # Bob's token for his own run does not open Alice's.
    own = await create_run(client, bob)
    token = (await client.post(f"/runs/{own['id']}/stream-token", headers=bob)).json()["token"]
    assert_problem(await client.get(f"/runs/{rid}/events", params={"token": token}), 401, "unauthorized")
    assert (await client.get(f"/runs/{rid}", headers=alice)).json()["status"] == "pending"


async def test_unexpected_error_is_a_500_problem_without_internals(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("secret internals: password=hunter2")

    problem = assert_problem(await client.get("/boom"), 500, "internal_error")
    assert "hunter2" not in str(problem) and "RuntimeError" not in str(problem)


@pytest.fixture
async def outage_client(database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """An app whose database is a closed port."""
    dead = f"postgresql://postgres@127.0.0.1:{free_port()}/runq"
    app = create_app(Settings(database_url=dead, secret_key=SECRET))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://runq.test") as client:
            yield client


async def test_database_outage_is_503(outage_client: httpx.AsyncClient) -> None:
    key = {"Authorization": "Bearer rq_whatever"}
    for request in (
        outage_client.get("/readyz"),
        outage_client.get("/runs", headers=key),
        outage_client.post("/runs", json={"agent": "demo"}, headers=key),
        outage_client.get(f"/runs/{uuid.uuid4()}/events", headers=key),
    ):
        response = await request
        assert_problem(response, 503, "database_unavailable")
        assert int(response.headers["retry-after"]) > 0
    assert (await outage_client.get("/healthz")).status_code == 200
