"""The operator UI in headless Chromium (Debian's package, driven by Playwright), against a real
API process and a real worker on the test database.

Chromium comes from ``.ci/ui-deps`` (apt-get); Playwright never downloads a browser here. Without
a Chromium the browser tests are skipped with a message saying so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, Playwright, expect, sync_playwright

from tests.api_support import ROOT, SECRET, ApiProcess
from tests.fakes.openai_server import FakeOpenAI

ARTIFACTS = ROOT / "tests" / "artifacts" / "ui"
LANGGRAPH_CHAT_CONFIG = ROOT / "examples" / "langgraph-chat" / "langgraph.json"
CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
]
# Fast leases and retries; short stream tokens, so that a reconnect needs a fresh one.
SERVER_ENV = {
    "RUNQ_LEASE_S": "2",
    "RUNQ_HEARTBEAT_S": "0.5",
    "RUNQ_POLL_S": "0.2",
    "RUNQ_REAPER_S": "0.5",
    "RUNQ_RETRY_BASE_S": "0.2",
    "RUNQ_RETRY_MAX_S": "0.5",
    "RUNQ_STREAM_TOKEN_TTL_S": "2",
    "RUNQ_SECRET_KEY": SECRET,
    "RUNQ_WEBHOOK_ALLOW_HOSTS": "127.0.0.1",
}
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}

expect.set_options(timeout=15_000)


def find_chromium() -> str | None:
    configured = os.environ.get("RUNQ_CHROMIUM")
    for candidate in (configured, *CHROMIUM_CANDIDATES) if configured else CHROMIUM_CANDIDATES:
        path = shutil.which(candidate)
        if path:
            return path
    return None


class UiServer(ApiProcess):
    """The API process serving /ui; ``restart`` brings it back on the same port after a crash."""

    def __init__(self, database_url: str) -> None:
        super().__init__(database_url, env=SERVER_ENV)
        self.env = os.environ | {"RUNQ_DATABASE_URL": database_url, **SERVER_ENV}

    def crash_and_restart(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.proc = subprocess.Popen(self.proc.args, cwd=ROOT, env=self.env)
        self.wait_ready()


@dataclass(frozen=True)
class Keys:
    tenant: str
    tenant_key: str
    admin_key: str

    def headers(self, key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}


@pytest.fixture(autouse=True)
def _empty_tables() -> None:
    """Overrides the suite's async table reset: these tests never use ``engine``, and Playwright's
    sync API keeps an event loop running in this thread, where no async fixture can run."""


@pytest.fixture(scope="package")
def chromium() -> str:
    path = find_chromium()
    if path is None:
        pytest.skip("no Chromium found (install it with .ci/ui-deps: apt-get install chromium chromium-driver)")
    return path


@pytest.fixture(scope="package")
def server(chromium: str, database_url: str) -> Iterator[UiServer]:
    api = UiServer(database_url)
    try:
        api.wait_ready()
        yield api
    finally:
        api.stop()


@pytest.fixture(scope="package")
def model() -> Iterator[FakeOpenAI]:
    """The scripted model the ``openai`` agent's runs call (the chat page's tests script it)."""
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture(scope="package")
def worker(server: UiServer, database_url: str, model: FakeOpenAI) -> Iterator[subprocess.Popen[bytes]]:
    """The one worker of the package: every test's runs share the database, so any worker here
    may claim any of them, and this one runs the demo and the ``openai`` agent alike, and the
    graph of examples/langgraph-chat (whose ChatOpenAI reads ``OPENAI_*``)."""
    model_env = {
        "RUNQ_OPENAI_BASE_URL": model.base_url,
        "RUNQ_OPENAI_API_KEY": "sk-fake",
        "RUNQ_LANGGRAPH_CONFIG": str(LANGGRAPH_CHAT_CONFIG),
        "OPENAI_BASE_URL": model.base_url,
        "OPENAI_API_KEY": "sk-fake",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.worker", "--concurrency", "4"],
        cwd=ROOT,
        env=os.environ | {"RUNQ_DATABASE_URL": database_url, **SERVER_ENV, **model_env},
    )
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def create_key(database_url: str, tenant: str, *admin: str) -> str:
    """``runq keys create`` (a subprocess: Playwright's sync API keeps an event loop in this thread)."""
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "keys", "create", "--tenant", tenant, *admin],
        cwd=ROOT,
        env=os.environ | {"RUNQ_DATABASE_URL": database_url},
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


@pytest.fixture(scope="package")
def keys(database_url: str) -> Keys:
    """One tenant (so the list at the end shows every run the tests made) and an admin of another."""
    tenant = f"acme-{uuid.uuid4().hex[:6]}"
    return Keys(
        tenant=tenant,
        tenant_key=create_key(database_url, tenant),
        admin_key=create_key(database_url, "ops", "--admin"),
    )


@pytest.fixture(scope="package")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="package")
def browser(playwright: Playwright, chromium: str) -> Iterator[Browser]:
    browser = playwright.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
    try:
        yield browser
    finally:
        browser.close()


@dataclass
class Tab:
    """A page of its own browser context (so its own sessionStorage), and what went wrong in it."""

    page: Page
    base_url: str
    page_errors: list[str]
    foreign_requests: list[str]

    def sign_in(self, key: str, role: str) -> None:
        self.page.goto(f"{self.base_url}/ui")
        self.page.get_by_label("API key").fill(key)
        self.page.get_by_role("button", name="Sign in").click()
        expect(self.page.locator("#role")).to_have_text(role)

    def open_run(self, run_id: str) -> None:
        self.page.goto(f"{self.base_url}/ui#/runs/{run_id}")

    def shot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.page.evaluate("window.scrollTo(0, 0)")  # the sticky top bar belongs at the top
        self.page.screenshot(path=path, full_page=True)
        return path


@pytest.fixture
def tab_factory(
    browser: Browser, server: UiServer, worker: subprocess.Popen[bytes], request: pytest.FixtureRequest
) -> Iterator[Any]:
    """``tab_factory(viewport=…)`` → a new :class:`Tab`; each is screenshotted and closed at the end."""
    contexts = []
    tabs: list[Tab] = []

    def make(viewport: dict[str, int] = DESKTOP) -> Tab:
        context = browser.new_context(viewport=viewport, base_url=server.base_url)
        contexts.append(context)
        page = context.new_page()
        tab = Tab(page, server.base_url, [], [])
        page.on("pageerror", lambda error: tab.page_errors.append(str(error)))
        page.on(
            "request",
            lambda req: None
            if req.url.startswith((server.base_url, "data:", f"blob:{server.base_url}"))
            else tab.foreign_requests.append(req.url),
        )
        page.on("console", lambda msg: _log_console(request.node.name, msg))
        tabs.append(tab)
        return tab

    try:
        yield make
        for tab in tabs:
            assert not tab.page_errors, f"uncaught errors in the page: {tab.page_errors}"
            assert not tab.foreign_requests, f"the page reached outside its origin: {tab.foreign_requests}"
    finally:
        for i, tab in enumerate(tabs):
            if not tab.page.is_closed():
                tab.shot(f"{request.node.name}-end-{i}")
        for context in contexts:
            context.close()


def _log_console(test: str, message: ConsoleMessage) -> None:
    if message.type == "error":
        print(f"[{test}] console: {message.text}")


@pytest.fixture
def api_client(server: UiServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=10) as client:
        yield client
