"""examples/chat in Chromium: the AI SDK's ``useChat`` against a live runq (API, worker, the fake
OpenAI server), through the example's session endpoint, so the browser holds a thread token only.

The page is served by the session endpoint on one origin and calls runq on another (CORS), as a
team's frontend would. The model's stream is scripted: ``midway`` holds an answer half-written
while the page reloads, ``stall`` keeps one open until Stop cancels the run.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, Request, expect

from tests.api_support import ROOT, ApiProcess, free_port
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall, answer, calls, stall
from tests.ui.conftest import SERVER_ENV, Keys
from tests.ui.test_operator_ui import publish

EXAMPLE = ROOT / "examples" / "chat"
# Every run of these chats may call the shell tool, each call behind an approval.
CHAT_INPUT = {"tools": ["shell"], "approve_tools": ["shell"]}
LONG_ANSWER = (
    "Resumable streams need no Redis here: every event is stored before it is sent, "
    "so a reloaded page replays the answer from the log and then follows it live."
)


@dataclass
class ChatApp:
    """The live pieces: runq's API, the session endpoint that serves the page, the tenant key."""

    page_url: str
    api: httpx.Client
    tenant_key: str

    @property
    def origins(self) -> tuple[str, str]:
        return self.page_url, str(self.api.base_url).rstrip("/")


@dataclass
class ChatTab:
    page: Page
    app: ChatApp
    leaks: list[str] = field(default_factory=list)  # requests that carried the tenant key
    foreign: list[str] = field(default_factory=list)  # requests to neither the page nor runq
    errors: list[str] = field(default_factory=list)

    def watch(self, request: Request) -> None:
        if self.app.tenant_key in json.dumps(request.all_headers()) + request.url + (request.post_data or ""):
            self.leaks.append(request.url)
        if not request.url.startswith(self.app.origins):
            self.foreign.append(request.url)

    def send(self, text: str) -> None:
        self.page.get_by_role("textbox", name="Message").fill(text)
        self.page.get_by_role("button", name="Send").click()

    @property
    def answers(self) -> Any:
        return self.page.locator(".message-assistant")


def wait_until(check: Callable[[], Any], *, within: float = 20.0) -> Any:
    """Poll ``check`` (an HTTP read) until it returns something truthy."""
    deadline = time.monotonic() + within
    while not (result := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {within}s")
        time.sleep(0.1)
    return result


@contextmanager
def live_chat(
    database_url: str, keys: Keys, page_dir: Path, *, api_env: dict[str, str], session_env: dict[str, str]
) -> Iterator[ChatApp]:
    """runq's API on its own (its CORS origin is the page's, more settings in ``api_env``) and
    examples/chat's session endpoint serving the built page of ``page_dir``."""
    node = shutil.which("node")
    if node is None or not (page_dir / "dist" / "index.html").is_file():
        pytest.fail(f"node and the built page are needed: make {page_dir.name}-example")
    page_port = free_port()
    page_url = f"http://127.0.0.1:{page_port}"
    api = ApiProcess(database_url, env=SERVER_ENV | {"RUNQ_CORS_ORIGINS": page_url} | api_env)
    session = subprocess.Popen(
        [node, str(EXAMPLE / "session-endpoint.js")],
        cwd=page_dir,
        env=os.environ
        | {"RUNQ_URL": api.base_url, "RUNQ_KEY": keys.tenant_key, "PORT": str(page_port)}
        | {"RUNQ_CHAT_DIST": str(page_dir / "dist")}
        | session_env,
    )
    try:
        api.wait_ready()
        wait_until(lambda: _answers(page_url), within=15)
        with httpx.Client(base_url=api.base_url, timeout=10, headers=keys.headers(keys.tenant_key)) as client:
            yield ChatApp(page_url, client, keys.tenant_key)
    finally:
        session.terminate()
        session.wait(timeout=10)
        api.stop()


@pytest.fixture(scope="module")
def chat_app(
    chromium: str, database_url: str, keys: Keys, worker: subprocess.Popen[bytes]
) -> Iterator[ChatApp]:
    """The page beside the package's worker, each run of its chats with ``CHAT_INPUT``."""
    with live_chat(database_url, keys, EXAMPLE, api_env={}, session_env={"RUNQ_CHAT_INPUT": json.dumps(CHAT_INPUT)}) as app:
        yield app


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.TransportError:
        return False


@pytest.fixture
def tab(browser: Browser, chat_app: ChatApp, model: FakeOpenAI) -> Iterator[ChatTab]:
    """A fresh browser context on the chat page; at the end no request may have carried the
    tenant key or gone elsewhere than the page and runq, and no error may have reached the page."""
    model.reset()
    context = browser.new_context(viewport={"width": 1000, "height": 620})
    page = context.new_page()
    chat = ChatTab(page, chat_app)
    page.on("request", chat.watch)
    page.on("pageerror", lambda error: chat.errors.append(str(error)))
    page.goto(chat_app.page_url)
    expect(page.get_by_role("textbox", name="Message")).to_be_visible()
    try:
        yield chat
        assert not chat.leaks, f"the tenant key reached the browser: {chat.leaks}"
        assert not chat.foreign, f"the page reached outside the page and runq: {chat.foreign}"
        assert not chat.errors, f"uncaught errors in the page: {chat.errors}"
    finally:
        context.close()


def run_of(chat_app: ChatApp, run_id: str) -> dict[str, Any]:
    response = chat_app.api.get(f"/runs/{run_id}")
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def test_a_message_streams_its_answer_and_the_chat_survives_a_reload(
    tab: ChatTab, model: FakeOpenAI, chat_app: ChatApp
) -> None:
    model.script(answer("Hello! I am the fake model, streamed four characters at a time."))
    tab.send("Say hello")
    expect(tab.answers.locator(".text")).to_have_text("Hello! I am the fake model, streamed four characters at a time.")
    expect(tab.page.get_by_test_id("status")).to_have_text("ready")
    run_id = tab.answers.get_attribute("data-message-id")
    assert run_of(chat_app, str(run_id))["status"] == "done"

    tab.page.reload()
    expect(tab.page.locator(".message-user .text")).to_have_text("Say hello")
    expect(tab.answers.locator(".text")).to_have_text("Hello! I am the fake model, streamed four characters at a time.")


def test_a_reload_mid_answer_continues_it_without_repeating_text(tab: ChatTab, model: FakeOpenAI) -> None:
    midway = threading.Event()
    model.script(Reply(text=LONG_ANSWER, midway=midway))
    # The fake holds the second half of its chunks (a role chunk, 4-character pieces, the finish
    # chunk, [DONE]) until ``midway``: the page shows exactly the pieces of the first half.
    chunks = 1 + math.ceil(len(LONG_ANSWER) / 4) + 2
    partial = LONG_ANSWER[: 4 * (chunks // 2 - 1)]
    tab.send("Why no Redis?")
    expect(tab.answers.locator(".text")).to_have_text(partial)

    tab.page.reload()
    expect(tab.answers.locator(".text")).to_have_text(partial)  # replayed from runq's log
    midway.set()
    expect(tab.answers.locator(".text")).to_have_text(LONG_ANSWER)  # then live, no character twice
    expect(tab.answers).to_have_count(1)
    expect(tab.page.get_by_test_id("status")).to_have_text("ready")


def test_stop_cancels_the_run(tab: ChatTab, model: FakeOpenAI, chat_app: ChatApp) -> None:
    model.script(stall("Let me think about this for a very long time"))
    tab.send("Take your time")
    expect(tab.answers.locator(".text")).to_contain_text("a very long time")
    run_id = str(tab.answers.get_attribute("data-message-id"))
    tab.page.get_by_role("button", name="Stop").click()
    wait_until(lambda: run_of(chat_app, run_id)["status"] == "cancelled")
    expect(tab.page.get_by_role("button", name="Send")).to_be_visible()
    wait_until(lambda: model.requests and model.requests[-1].disconnected)  # the model call ended too


def test_approve_runs_the_tool_once_and_the_answer_continues(
    tab: ChatTab, model: FakeOpenAI, chat_app: ChatApp
) -> None:
    model.script(
        answer("Sure. I can run shell commands on the worker, each one after you approve it."),
        calls(ToolCall("call_ok", "shell", {"command": "echo approved-$((6 * 7))"})),
        answer("The command printed approved-42."),
    )
    tab.send("Can you check something on the server?")
    expect(tab.answers.locator(".text")).to_contain_text("each one after you approve it")
    expect(tab.page.get_by_test_id("status")).to_have_text("ready")
    tab.send("Yes: print the answer to everything")
    reply = tab.answers.nth(1)
    tool = reply.locator(".tool")
    expect(tool.get_by_role("button", name="Approve")).to_be_visible()
    expect(tool.locator(".tool-input")).to_contain_text("approved-$((6 * 7))")
    publish(_shot(tab.page, "chat-example"), "chat-example.png")

    tool.get_by_role("button", name="Approve").click()
    expect(reply.locator(".text")).to_have_text("The command printed approved-42.")
    expect(tool).to_have_count(1)
    expect(tool.locator(".tool-output")).to_contain_text("approved-42")
    run_id = str(reply.get_attribute("data-message-id"))
    wait_until(lambda: run_of(chat_app, run_id)["status"] == "done")
    events = chat_app.api.get(f"/runs/{run_id}/events", headers={"Accept": "application/json"}).json()["items"]
    assert [e["type"] for e in events].count("tool.result") == 1

    tab.page.reload()  # the history keeps the answered approval and its result
    expect(tab.answers).to_have_count(2)
    expect(tab.answers.nth(1).locator(".tool-output")).to_contain_text("approved-42")
    expect(tab.page.get_by_role("button", name="Approve")).to_have_count(0)


def test_deny_never_runs_the_tool(tab: ChatTab, model: FakeOpenAI, chat_app: ChatApp) -> None:
    model.script(
        calls(ToolCall("call_no", "shell", {"command": "echo never"})),
        answer("Understood, I did not run it."),
    )
    tab.send("Delete everything")
    tool = tab.answers.locator(".tool")
    expect(tool.get_by_role("button", name="Deny")).to_be_visible()
    tool.get_by_role("button", name="Deny").click()
    expect(tab.answers.locator(".text")).to_have_text("Understood, I did not run it.")
    expect(tool.locator(".tool-state")).to_have_text("denied")
    run_id = str(tab.answers.get_attribute("data-message-id"))
    wait_until(lambda: run_of(chat_app, run_id)["status"] == "done")
    events = chat_app.api.get(f"/runs/{run_id}/events", headers={"Accept": "application/json"}).json()["items"]
    results = [e["data"] for e in events if e["type"] == "tool.result"]
    assert results and all("exit_code" not in json.dumps(result) for result in results)  # a denial, no shell


def _shot(page: Page, name: str) -> Any:
    path = ROOT / "tests" / "artifacts" / "ui" / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=path)
    return path


def test_a_chat_past_a_mebibyte_sends_only_its_new_message(tab: ChatTab, model: FakeOpenAI, chat_app: ChatApp) -> None:
    """runq keeps the history: the page sends the newest message alone (prepareSendMessagesRequest),
    so a chat whose history outgrew RUNQ_MAX_BODY_BYTES (and 1 MiB) goes on."""
    sent: list[int] = []
    tab.page.on("request", lambda r: sent.append(len(r.post_data_buffer or b"")) if r.url.endswith("/ai-sdk/chat") else None)
    long_answers = 12  # 90 KB each (a thread message holds at most 100,000 characters)
    model.script(*(Reply(text=str(i % 10) * 90_000, piece=65_536) for i in range(long_answers)))
    model.script(answer("Still here, after more than a mebibyte of chat."))
    for i in range(long_answers + 1):
        tab.send(f"Question {i}")
        expect(tab.answers).to_have_count(i + 1)
        expect(tab.page.get_by_test_id("status")).to_have_text("ready", timeout=30_000)
    expect(tab.answers.last.locator(".text")).to_have_text("Still here, after more than a mebibyte of chat.")
    chat_id = tab.page.evaluate("decodeURIComponent(location.hash.slice(1))")
    history = chat_app.api.get(f"/ai-sdk/chat/{chat_id}/messages").json()["items"]
    assert len(json.dumps(history)) > 1 << 20
    assert len(sent) == long_answers + 1 and max(sent) < 4096, sent


def test_an_error_is_shown_as_a_sentence(tab: ChatTab, model: FakeOpenAI) -> None:
    tab.send("x" * 300_000)  # one message over RUNQ_MAX_BODY_BYTES: runq refuses it with a problem
    alert = tab.page.get_by_role("alert")
    expect(alert).to_contain_text("A message of the chat request is larger than 262144 bytes")
    expect(alert).to_contain_text("(413 body_too_large)")
    expect(alert).not_to_contain_text("{")
    assert not model.requests
