"""The thread pages in a real browser: from a run of a thread to its conversation, each run's
events folded under its messages, and the threads list."""

from __future__ import annotations

import re
from typing import Any

import httpx
from playwright.sync_api import expect

from tests.ui.conftest import Keys, Tab
from tests.ui.test_operator_ui import create_run

THREAD_URL = re.compile(r"#/threads/([0-9a-f-]{36})$")


def test_a_run_links_to_its_thread_and_the_thread_shows_the_conversation(
    tab_factory: Any, keys: Keys, api_client: httpx.Client
) -> None:
    headers = keys.headers(keys.tenant_key)
    thread = api_client.post("/threads", json={"metadata": {"topic": "ui"}}, headers=headers).json()
    runs = []
    for prompt in ("Hello from the first message", "And the second one"):
        body = {"agent": "demo", "input": {"prompt": prompt, "steps": 1, "step_s": 0}}
        response = api_client.post(f"/threads/{thread['id']}/runs", json=body, headers=headers)
        assert response.status_code == 201, response.text
        runs.append(response.json())
    lone = create_run(api_client, keys, input={"steps": 0})

    tab: Tab = tab_factory()
    page = tab.page
    tab.sign_in(keys.tenant_key, "tenant")
    tab.open_run(runs[1]["id"])
    expect(page.locator(".title-line .badge")).to_have_text("done", timeout=20_000)
    page.locator(".facts").get_by_role("link", name=thread["id"][:8]).click()

    expect(page).to_have_url(THREAD_URL)
    turns = page.locator(".thread-turn")
    expect(turns).to_have_count(2)
    expect(turns.nth(0).locator(".chat-role")).to_have_text(["user", "assistant"])
    expect(turns.nth(0).locator(".message-content")).to_have_text(["Hello from the first message"] * 2)
    expect(turns.nth(1).locator(".role-user .message-content")).to_have_text("And the second one")
    expect(page.locator(".title-line .badge")).to_have_text("idle")

    fold = turns.nth(1).locator(".run-events")
    expect(fold.locator(".event-log")).to_be_hidden()  # folded until asked for
    fold.locator("summary").click()
    expect(fold.locator(".marker-completed")).to_be_visible()
    expect(fold.locator(".tool")).to_have_count(1)
    tab.shot("thread")

    page.get_by_role("link", name="Threads", exact=True).click()
    row = page.locator(f'tr[data-id="{thread["id"]}"]')
    expect(row).to_contain_text("idle")
    expect(row.locator('td[data-label="Messages"]')).to_have_text("4")
    row.get_by_role("link", name=thread["id"][:8]).click()
    expect(page).to_have_url(THREAD_URL)

    tab.open_run(lone["id"])
    expect(page.locator(".facts")).not_to_contain_text("Thread")  # a run without a thread links nowhere
