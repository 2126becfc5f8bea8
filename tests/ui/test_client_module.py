"""``/client.js`` in Chromium: ``followRun`` survives expired stream tokens and dropped
connections, delivering every event once and in order, then stops after the terminal one.

The page and everything it loads go through the fault proxy (so one origin), against the UI
server, whose stream tokens live 2 s (``RUNQ_STREAM_TOKEN_TTL_S``), and a real worker.
"""

from __future__ import annotations

import random
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.clients.faultproxy import FaultProxy
from tests.ui.conftest import SERVER_ENV, Keys, UiServer

TOKEN_TTL_S = float(SERVER_ENV["RUNQ_STREAM_TOKEN_TTL_S"])
CUT_STEPS = 8  # about 25 events, followed in a few seconds
CUT_MOST = 1500  # bytes a connection may carry before it is cut
STALL_AFTER = 600  # bytes: a token answer passes whole, an event stream stalls after its headers
SILENCE_MS = 1500
# Starts following and returns at once; ``window.followed`` resolves when following ends.
START = """
async ({ runId, key }) => {
  const { followRun } = await import("/client.js");
  const events = [], tokens = [], states = [];
  window.progress = { events, tokens, states };
  window.followed = new Promise((resolve) => {
    followRun(runId, {
      async getToken(id, scopes) {
        const response = await fetch(`/runs/${id}/stream-token`, {
          method: "POST", headers: { Authorization: `Bearer ${key}` },
        });
        if (!response.ok) throw Object.assign(new Error(`token: ${response.status}`), { status: response.status });
        const answer = await response.json();
        tokens.push({ at: Date.now(), scopes });
        return answer;
      },
      onEvent: ({ seq, type, data }) => events.push([seq, type, data]),
      onState: (state, detail) => states.push(detail === undefined ? state : `${state} ${detail}`),
      onEnd: ({ event, error }) => resolve({ events, tokens, states, end: event?.type ?? null, error: error?.message ?? null }),
    });
  });
}
"""


def follow(page: Page, run_id: str, key: str, start: str = START) -> Any:
    page.evaluate(start, {"runId": run_id, "key": key})
    return ended(page)


def ended(page: Page, within_s: float = 60) -> Any:
    """What following delivered, once it ended; fails (saying how far it got) if it does not."""
    page.evaluate("() => { window.outcome = undefined; window.followed.then((o) => { window.outcome = o; }); }")
    try:
        page.wait_for_function("() => window.outcome !== undefined", timeout=within_s * 1000)
    except PlaywrightTimeout as exc:
        progress = page.evaluate("() => ({ seqs: window.progress.events.map((e) => e[0]), states: window.progress.states })")
        raise AssertionError(f"following did not end: {progress}") from exc
    return page.evaluate("() => window.outcome")


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context()
    try:
        yield context.new_page()
    finally:
        context.close()


def create_run(server: UiServer, keys: Keys, **demo: Any) -> str:
    response = httpx.post(f"{server.base_url}/runs", json={"agent": "demo", "input": demo},
                          headers=keys.headers(keys.tenant_key))
    assert response.status_code == 201, response.text
    run_id: str = response.json()["id"]
    return run_id


def stored(server: UiServer, keys: Keys, run_id: str) -> list[list[Any]]:
    response = httpx.get(f"{server.base_url}/runs/{run_id}/events", params={"limit": 1000},
                         headers=keys.headers(keys.tenant_key) | {"Accept": "application/json"})
    return [[e["seq"], e["type"], e["data"]] for e in response.json()["items"]]


def stream_tokens(requests: list[str]) -> set[str]:
    return {httpx.URL(url).params["token"] for url in requests if "/events?" in url and "token=" in url}


def test_follow_run_survives_an_expired_token_and_a_dropped_connection(
    page: Page, server: UiServer, worker: subprocess.Popen[bytes], keys: Keys
) -> None:
    """The connection drops while the token is fresh, then stays up past the token's expiry and
    drops again: each reconnect resumes after the last seq delivered, the second with a new
    token, and the log arrives whole."""
    with FaultProxy(server.port, lambda: None) as proxy:
        requests: list[str] = []
        page.on("request", lambda request: requests.append(request.url))
        page.goto(f"{proxy.base_url}/healthz")
        run_id = create_run(server, keys, prompt="the token expires in the middle", steps=12, step_s=0.5)
        page.evaluate(START, {"runId": run_id, "key": keys.tenant_key})
        page.wait_for_function("() => window.progress.events.length >= 3")
        proxy.cut_all()
        page.wait_for_function("() => window.progress.states.filter((s) => s === 'live').length >= 2")
        page.wait_for_timeout(TOKEN_TTL_S * 1000 + 500)  # the token the stream opened with is expired now
        assert page.evaluate("() => window.progress.events.at(-1)[1]") != "run.completed"
        proxy.cut_all()
        outcome = ended(page)
    assert outcome["error"] is None and outcome["end"] == "run.completed"
    log = stored(server, keys, run_id)
    assert outcome["events"] == log  # no gap, no duplicate, nothing after the end
    assert outcome["events"][-1][1] == "run.completed" and len(log) > 20
    assert outcome["states"][:2] == ["connecting", "live"] and outcome["states"].count("live") >= 3
    assert proxy.cuts >= 2
    assert len(stream_tokens(requests)) >= 2 and len(outcome["tokens"]) >= 2
    assert outcome["tokens"][0]["scopes"] == ["read"]


def test_follow_run_opened_after_the_end_stops_without_redelivering(
    page: Page, server: UiServer, worker: subprocess.Popen[bytes], keys: Keys
) -> None:
    run_id = create_run(server, keys, steps=1, step_s=0)
    page.goto(f"{server.base_url}/healthz")
    first = follow(page, run_id, keys.tenant_key)
    last = first["events"][-1][0]
    again = follow(page, run_id, keys.tenant_key, START.replace("followRun(runId, {", f"followRun(runId, {{ after: {last},"))
    assert again["events"] == [] and again["end"] == "run.completed" and again["error"] is None


def test_client_module_is_public_and_resume_reports_the_problem(page: Page, server: UiServer, keys: Keys) -> None:
    module = httpx.get(f"{server.base_url}/client.js")
    assert module.status_code == 200 and module.headers["content-type"].startswith("text/javascript")
    assert module.headers["access-control-allow-origin"] == "*"
    run_id = create_run(server, keys, steps=1, step_s=0)
    page.goto(f"{server.base_url}/healthz")
    error = page.evaluate(
        """async ({ runId }) => {
          const { resumeRun, RunqError } = await import("/client.js");
          try { await resumeRun(runId, { approved: true }, { token: "not-a-token" }); return null; }
          catch (e) { return { isRunqError: e instanceof RunqError, status: e.status }; }
        }""",
        {"runId": run_id},
    )
    # No resume route yet (DESIGN §9): whatever the server answers arrives as a RunqError.
    assert error is not None and error["isRunqError"] and 400 <= error["status"] < 500


def test_follow_run_through_random_cuts(
    page: Page, server: UiServer, worker: subprocess.Popen[bytes], keys: Keys
) -> None:
    """Once following has started, every connection (event streams, token requests, JSON pages)
    is cut after a random number of bytes from the server: inside headers, chunk framing, SSE
    fields and characters. What the page received is the stored log, each event once."""
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    cutting = threading.Event()
    with FaultProxy(server.port, lambda: rng.randint(1, CUT_MOST) if cutting.is_set() else None) as proxy:
        page.goto(f"{proxy.base_url}/healthz")
        run_id = create_run(server, keys, prompt="cut, cut, cut: zwölf Boxkämpfer ✓", steps=CUT_STEPS, step_s=0.1)
        started = time.monotonic()
        page.evaluate(START, {"runId": run_id, "key": keys.tenant_key})
        cutting.set()
        proxy.cut_all()
        outcome = ended(page, within_s=60)
        took, cuts = time.monotonic() - started, proxy.cuts
    log = stored(server, keys, run_id)
    assert outcome["error"] is None and outcome["end"] == "run.completed", f"seed {seed}"
    assert outcome["events"] == log, f"seed {seed}"  # no gap, no duplicate, nothing after the end
    print(f"seed {seed}: {len(log)} events through {cuts} cuts in {took:.1f} s")
    assert cuts >= 3, f"seed {seed}"


def test_follow_run_resumes_a_connection_that_went_silent(
    page: Page, server: UiServer, worker: subprocess.Popen[bytes], keys: Keys
) -> None:
    """The connection after a drop stalls after a few hundred bytes, open but silent (the proxy
    swallows the events and keep-alives): EventSource would wait forever; the follower gives up on
    it after ``silenceMs`` and resumes after the last seq it delivered."""
    stall_next = threading.Event()

    def budget() -> int | None:
        if not stall_next.is_set():
            return None
        stall_next.clear()
        return STALL_AFTER

    with FaultProxy(server.port, budget, stall=True) as proxy:
        page.goto(f"{proxy.base_url}/healthz")
        run_id = create_run(server, keys, prompt="silence in the middle", steps=20, step_s=0.2)
        page.evaluate(START.replace("followRun(runId, {", f"followRun(runId, {{ silenceMs: {SILENCE_MS},"),
                      {"runId": run_id, "key": keys.tenant_key})
        page.wait_for_function("() => window.progress.events.length >= 3")
        started = time.monotonic()
        stall_next.set()
        proxy.cut_all()
        outcome = ended(page)
        took = time.monotonic() - started
        assert proxy.stalls == 1
    assert outcome["error"] is None and outcome["end"] == "run.completed"
    assert outcome["events"] == stored(server, keys, run_id)
    # Resumed by the short silence timeout, not by the 15 s request timeout or the 30 s default.
    assert took < 12
