"""examples/langgraph-chat in Chromium: LangGraph's ``useStream`` (``@langchain/langgraph-sdk``
1.15) against runq's ``/langgraph`` on a live runq (API, worker, the fake OpenAI server), the
browser holding a thread token only, through examples/chat's session endpoint.

Tokens stream in; a reload mid-answer rejoins the run (``reconnectOnMount``) and gets the rest
with nothing twice; Stop cancels the run; the graph's ``interrupt()`` is answered in the page.
"""

from __future__ import annotations

import math
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.api_support import ROOT
from tests.fakes.openai_server import FakeOpenAI, Reply, answer, stall
from tests.ui.conftest import LANGGRAPH_CHAT_CONFIG, Keys
from tests.ui.test_chat_example import LONG_ANSWER, ChatApp, ChatTab, _shot, live_chat, wait_until
from tests.ui.test_chat_example import tab as tab  # the fixture, on this module's chat_app
from tests.ui.test_operator_ui import publish

EXAMPLE = ROOT / "examples" / "langgraph-chat"


@pytest.fixture(scope="module")
def chat_app(chromium: str, database_url: str, keys: Keys, worker: subprocess.Popen[bytes]) -> Iterator[ChatApp]:
    """runq's API serving the example's langgraph.json beside the package's worker; the session
    endpoint's tokens are for the graph's runs only."""
    api_env = {"RUNQ_LANGGRAPH_CONFIG": str(LANGGRAPH_CHAT_CONFIG)}
    with live_chat(database_url, keys, EXAMPLE, api_env=api_env, session_env={"RUNQ_CHAT_AGENT": "chat"}) as app:
        yield app


def last_run(tab: ChatTab) -> dict[str, Any]:
    """The newest run of the page's thread, as runq shows it."""
    thread_id = tab.page.evaluate("decodeURIComponent(location.hash.slice(1))")
    runs = tab.app.api.get(f"/threads/{thread_id}/runs").json()["items"]
    assert runs, "the page started no run"
    newest: dict[str, Any] = runs[0]
    return newest


def test_tokens_stream_in_and_the_chat_survives_a_reload(tab: ChatTab, model: FakeOpenAI) -> None:
    model.script(answer("Hello from the graph, streamed four characters at a time."))
    tab.send("Say hello")
    expect(tab.answers.locator(".text")).to_have_text("Hello from the graph, streamed four characters at a time.")
    expect(tab.page.get_by_test_id("status")).to_have_text("ready")
    wait_until(lambda: last_run(tab)["status"] == "done")

    tab.page.reload()  # the thread's history, read with the thread token
    expect(tab.page.locator(".message-user .text")).to_have_text("Say hello")
    expect(tab.answers.locator(".text")).to_have_text("Hello from the graph, streamed four characters at a time.")


def test_a_reload_mid_answer_rejoins_the_run_without_repeating_text(tab: ChatTab, model: FakeOpenAI) -> None:
    midway = threading.Event()
    model.script(Reply(text=LONG_ANSWER, midway=midway))
    chunks = 1 + math.ceil(len(LONG_ANSWER) / 4) + 2  # as tests/ui/test_chat_example.py counts them
    partial = LONG_ANSWER[: 4 * (chunks // 2 - 1)]
    tab.send("Why no Redis?")
    expect(tab.answers.locator(".text")).to_have_text(partial)

    tab.page.reload()  # reconnectOnMount: the run's stream joined, replayed from runq's log
    expect(tab.answers.locator(".text")).to_have_text(partial)
    midway.set()
    expect(tab.answers.locator(".text")).to_have_text(LONG_ANSWER)
    expect(tab.answers).to_have_count(1)
    expect(tab.page.get_by_test_id("status")).to_have_text("ready")


def test_stop_cancels_the_run(tab: ChatTab, model: FakeOpenAI) -> None:
    model.script(stall("Let me think about this for a very long time"))
    tab.send("Take your time")
    expect(tab.answers.locator(".text")).to_contain_text("a very long time")
    tab.page.get_by_role("button", name="Stop").click()
    wait_until(lambda: last_run(tab)["status"] == "cancelled")
    expect(tab.page.get_by_role("button", name="Send")).to_be_visible()
    wait_until(lambda: model.requests and model.requests[-1].disconnected)  # the model call ended too


def test_an_interrupt_is_answered_in_the_page(tab: ChatTab, model: FakeOpenAI) -> None:
    model.script(answer("Deploying, as you confirmed."))
    tab.send("/confirm deploy to production")
    question = tab.page.get_by_role("group", name="Question")
    expect(question).to_contain_text("Go ahead with “deploy to production”?")
    assert not model.requests  # the graph waits for the person before calling the model
    publish(_shot(tab.page, "langgraph-chat"), "langgraph-chat.png")
    question.get_by_role("button", name="Yes").click()
    expect(tab.answers.locator(".text")).to_have_text("Deploying, as you confirmed.")
    expect(question).to_have_count(0)
    assert "The person answered: yes" in str(model.requests[-1].body)
