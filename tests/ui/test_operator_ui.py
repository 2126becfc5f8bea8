"""The operator UI end to end: a real browser, the API process, a worker running the demo agent."""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
from typing import Any

import httpx
from playwright.sync_api import Page, expect

from tests.api_support import ROOT
from tests.ui.conftest import PHONE, Keys, Tab, UiServer

DOCS_SCREENSHOTS = ROOT / "docs" / "screenshots"
RUN_URL = re.compile(r"#/runs/([0-9a-f-]{36})$")


def create_run(client: httpx.Client, keys: Keys, **body: Any) -> dict[str, Any]:
    response = client.post("/runs", json={"agent": "demo"} | body, headers=keys.headers(keys.tenant_key))
    assert response.status_code == 201, response.text
    run: dict[str, Any] = response.json()
    return run


def event_types(client: httpx.Client, keys: Keys, run_id: str) -> list[str]:
    response = client.get(
        f"/runs/{run_id}/events", headers=keys.headers(keys.tenant_key) | {"Accept": "application/json"}
    )
    return [event["type"] for event in response.json()["items"]]


def status_badge(page: Page) -> Any:
    return page.locator(".title-line .badge")


def publish(shot: Any, name: str) -> None:
    """Copy a screenshot into docs/ when asked to (RUNQ_UPDATE_SCREENSHOTS=1), so the committed
    images change only on purpose."""
    if os.environ.get("RUNQ_UPDATE_SCREENSHOTS") == "1":
        DOCS_SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, DOCS_SCREENSHOTS / name)


def test_sign_in_start_a_demo_run_and_watch_it_stream(tab_factory: Any, keys: Keys) -> None:
    tab: Tab = tab_factory()
    page = tab.page
    page.goto(f"{tab.base_url}/ui")
    page.get_by_label("API key").fill("rq_not-a-key")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("unknown or revoked")

    tab.sign_in(keys.tenant_key, "tenant")
    expect(page.get_by_role("link", name="Workers")).to_be_hidden()
    prompt = "Streaming from the browser test, one word at a time."
    page.get_by_label("Prompt").fill(prompt)
    page.get_by_label("Steps").fill("8")
    page.get_by_label("Seconds per step").fill("0.5")
    page.get_by_role("button", name="Start run").click()

    expect(page).to_have_url(RUN_URL)
    # The deltas arrive while the run is still stepping: the stream is live, not a replay.
    expect(page.locator(".message-text")).to_have_text(prompt)
    expect(page.locator(".marker-completed")).to_have_count(0)
    expect(page.locator(".stream-state")).to_have_text("Live")
    tab.shot("run-streaming")

    expect(page.locator(".marker-completed")).to_be_visible()
    expect(status_badge(page)).to_have_text("done")
    expect(page.locator(".tool")).to_have_count(8)
    expect(page.locator(".tool-state.ok")).to_have_count(8)
    expect(page.locator(".stream-state")).to_have_text("Ended")
    expect(page.get_by_role("button", name="Stop")).to_have_count(0)

    page.locator(".tool summary").first.click()  # tool calls are folded: open one
    expect(page.locator(".tool").first.locator(".tool-body")).to_contain_text("step 1 of 8 done")

    match = RUN_URL.search(page.url)
    assert match
    page.get_by_role("link", name="← Runs").click()
    expect(page.locator(f'tr[data-id="{match.group(1)}"] .badge')).to_have_text("done")


def test_stop_a_running_run(tab_factory: Any, keys: Keys, api_client: httpx.Client) -> None:
    run = create_run(api_client, keys, input={"prompt": "a long one", "steps": 200, "step_s": 0.2})
    tab: Tab = tab_factory()
    tab.sign_in(keys.tenant_key, "tenant")
    tab.open_run(run["id"])
    page = tab.page
    expect(page.locator(".tool-state.ok").nth(1)).to_be_visible()
    expect(status_badge(page)).to_have_text("leased")

    page.get_by_role("button", name="Stop").click()
    expect(status_badge(page)).to_have_text("cancelled")
    expect(page.locator(".marker-cancel-requested")).to_contain_text("Stop requested (user)")
    expect(page.locator(".marker-cancelled")).to_contain_text("Cancelled (user)")
    expect(page.locator(".facts")).to_contain_text("user")
    expect(page.get_by_role("button", name="Stop")).to_have_count(0)
    assert event_types(api_client, keys, run["id"])[-1] == "run.cancelled"


def test_admin_requeues_a_dead_run(tab_factory: Any, keys: Keys, api_client: httpx.Client) -> None:
    run = create_run(api_client, keys, input={"prompt": "doomed", "steps": 1, "step_s": 0, "fatal": True})
    admin: Tab = tab_factory()
    admin.sign_in(keys.admin_key, "admin")
    page = admin.page
    page.get_by_role("link", name="Dead letters").click()
    row = page.locator(f'tr[data-id="{run["id"]}"]')
    expect(row).to_contain_text("fatal_error")
    expect(row).to_contain_text(keys.tenant)
    admin.shot("dead-letters")

    row.get_by_role("button", name=re.compile("Requeue")).click()
    expect(page.get_by_role("status").filter(has_text="Requeued run")).to_be_visible()

    # The requeued run runs again (and, being fatal, dies again): a second execution in its log.
    tenant: Tab = tab_factory()
    tenant.sign_in(keys.tenant_key, "tenant")
    tenant.open_run(run["id"])
    expect(tenant.page.locator(".marker-queued")).to_have_count(2)
    expect(tenant.page.locator(".marker-queued").nth(1)).to_have_text("Requeued — execution 2")
    expect(tenant.page.locator(".marker-failed")).to_have_count(2)
    expect(tenant.page.locator(".attempt")).to_have_count(2)
    assert event_types(api_client, keys, run["id"]).count("run.queued") == 2

    # The admin's runs list, filtered to that tenant, shows it with its worker fields' columns.
    page.get_by_role("link", name="Runs", exact=True).click()
    page.get_by_label("Tenant").fill(keys.tenant)
    page.get_by_role("button", name="Filter").click()
    expect(page.locator(f'tr[data-id="{run["id"]}"]')).to_contain_text("dead")
    expect(page.locator("table.data tbody tr td:nth-child(2)").first).to_have_text(keys.tenant)


def test_admin_requeues_from_the_run_page(tab_factory: Any, keys: Keys, api_client: httpx.Client) -> None:
    """The admin's own tenant's run: its page follows the log into the new execution."""
    response = api_client.post(
        "/runs",
        json={"agent": "demo", "input": {"steps": 0, "fatal": True}},
        headers=keys.headers(keys.admin_key),
    )
    run_id = response.json()["id"]
    admin: Tab = tab_factory()
    admin.sign_in(keys.admin_key, "admin")
    admin.open_run(run_id)
    page = admin.page
    expect(page.locator(".marker-failed")).to_contain_text("fatal_error")
    expect(page.locator(".stream-state")).to_have_text("Ended")

    page.get_by_role("button", name="Requeue").click()
    expect(page.locator(".marker-queued").nth(1)).to_have_text("Requeued — execution 2")
    expect(page.locator(".marker-failed")).to_have_count(2)
    expect(status_badge(page)).to_have_text("dead")


def test_admin_sees_an_idle_worker(tab_factory: Any, keys: Keys) -> None:
    admin: Tab = tab_factory()
    admin.sign_in(keys.admin_key, "admin")
    page = admin.page
    page.get_by_role("link", name="Workers").click()
    # The package's one worker (--concurrency 4); an earlier test's cancelled run may still be
    # ending, so wait past a heartbeat or two for it to be idle.
    idle = page.locator('article.worker[data-idle="true"]')
    expect(idle).to_have_count(1, timeout=20_000)
    expect(idle.locator(".worker-slots")).to_have_text("0/4 slots in use")
    expect(idle).to_contain_text(f"runq {importlib.metadata.version('runq')}")
    expect(idle).to_contain_text("Idle: waiting for work, no lease held.")
    expect(idle.get_by_role("table")).to_have_count(0)


def test_admin_sees_workers_and_queue_stats(
    tab_factory: Any, keys: Keys, api_client: httpx.Client
) -> None:
    run = create_run(api_client, keys, input={"steps": 200, "step_s": 0.2})
    admin: Tab = tab_factory()
    admin.sign_in(keys.admin_key, "admin")
    page = admin.page
    try:
        page.get_by_role("link", name="Workers").click()
        lease = page.locator(f'a[href="#/runs/{run["id"]}"]')
        expect(lease).to_be_visible()
        busy = page.locator("article.worker").filter(has=lease)
        expect(busy).to_contain_text(keys.tenant)
        expect(busy.locator(".worker-slots")).to_contain_text("/4 slots in use")
        admin.shot("workers")

        page.get_by_role("link", name="Stats").click()
        expect(page.locator('[data-stat="leased"] .tile-value')).not_to_have_text("0")
        expect(page.get_by_role("table", name="In-flight runs per tenant")).to_contain_text(keys.tenant)
        expect(page.get_by_role("table", name="Use against limits per tenant")).to_contain_text(keys.tenant)
        admin.shot("stats")
    finally:
        api_client.post(f"/runs/{run['id']}/cancel", headers=keys.headers(keys.tenant_key))


def test_usage_on_the_run_page_and_per_tenant_with_charts_on_the_stats_page(
    tab_factory: Any, keys: Keys, api_client: httpx.Client
) -> None:
    run = create_run(api_client, keys, input={"prompt": "count", "steps": 3, "step_s": 0})
    admin: Tab = tab_factory()
    admin.sign_in(keys.admin_key, "admin")
    admin.open_run(run["id"])
    page = admin.page
    expect(status_badge(page)).to_have_text("done")
    # the demo agent's three steps are tool calls; it calls no model
    expect(page.locator("dl.facts")).to_contain_text("0 tokens (0 in, 0 out) · 0 model calls · 3 tool calls")

    page.get_by_role("link", name="Stats").click()
    usage = page.get_by_role("table", name="Usage per tenant in the last 24 hours")
    row = usage.locator("tr", has_text=keys.tenant)
    expect(row).to_be_visible()
    # the tenant's other tests' runs count too: at least this run's three tool calls
    assert int(row.locator("td").last.inner_text().replace(",", "")) >= 3
    depth = page.locator('figure[data-chart="Queue depth"]')
    # the reaper samples the queue once a minute, its first pass at once
    expect(depth.get_by_role("img")).to_have_attribute("aria-label", re.compile(r"^Queue depth: pending \d+, leased \d+"))
    expect(depth.locator("polyline")).to_have_count(2)
    finished = page.locator('figure[data-chart="Runs finished per minute"]')
    expect(finished.get_by_role("img")).to_be_visible()
    admin.shot("stats-usage")


def test_stream_resumes_after_the_api_crashes(
    tab_factory: Any, keys: Keys, api_client: httpx.Client, server: UiServer
) -> None:
    steps = 12
    run = create_run(api_client, keys, input={"prompt": "resume me", "steps": steps, "step_s": 0.4})
    tab: Tab = tab_factory()
    tab.sign_in(keys.tenant_key, "tenant")
    tab.open_run(run["id"])
    page = tab.page
    # Past the token's 2 s lifetime, so the reconnect cannot reuse the first stream's token.
    expect(page.locator(".tool-state.ok").nth(5)).to_be_visible()

    server.crash_and_restart()

    expect(page.locator(".marker-completed")).to_be_visible(timeout=30_000)
    expect(page.locator(".stream-state")).to_have_text("Ended")
    # Nothing lost, nothing shown twice: one message, one fold per step, the log up to the end.
    expect(page.locator(".message-text")).to_have_text("resume me")
    expect(page.locator(".tool")).to_have_count(steps)
    last_seq = api_client.get(f"/runs/{run['id']}", headers=keys.headers(keys.tenant_key)).json()[
        "last_event_seq"
    ]
    expect(page.locator(".event-log")).to_have_attribute("data-last-seq", str(last_seq))


def test_screenshots_of_a_run_and_the_phone_layout(
    tab_factory: Any, keys: Keys, api_client: httpx.Client
) -> None:
    run = create_run(
        api_client,
        keys,
        input={
            "prompt": "Summarise the open incidents, then check each service's health endpoint.",
            "steps": 3,
            "step_s": 0.3,
            "shell": "echo 'api: ok  worker: ok  postgres: ok'",
            "fail_attempts": 1,
        },
    )
    tab: Tab = tab_factory()
    tab.sign_in(keys.tenant_key, "tenant")
    tab.open_run(run["id"])
    page = tab.page
    expect(page.locator(".marker-completed")).to_be_visible()
    expect(page.locator(".attempt")).to_have_count(2)  # attempt 1 failed and was retried
    expect(page.locator(".marker-retrying")).to_contain_text("Attempt failed, retrying")
    # The retry resumed after the checkpointed steps: attempt 2 only runs the shell tool again.
    shell = page.locator(".attempt").nth(1).locator(".tool")
    expect(shell.locator(".tool-name")).to_have_text("shell")
    shell.locator("summary").click()
    expect(shell.locator(".tool-body")).to_contain_text("postgres: ok")
    page.locator(".marker-completed summary").click()
    publish(tab.shot("run"), "run.png")

    phone: Tab = tab_factory(viewport=PHONE)
    phone.sign_in(keys.tenant_key, "tenant")
    expect(phone.page.locator('.chip[data-status="done"] .chip-count')).not_to_have_text("0")
    publish(phone.shot("runs-phone"), "runs-phone.png")
    phone.open_run(run["id"])
    expect(phone.page.locator(".marker-completed")).to_be_visible()
    publish(phone.shot("run-phone"), "run-phone.png")


def test_run_page_shows_webhook_deliveries_and_schedules_are_listed(
    tab_factory: Any, keys: Keys, api_client: httpx.Client
) -> None:
    headers = keys.headers(keys.tenant_key)
    # Port 9 (discard) has no listener here: the worker's attempt is refused and retried.
    run = create_run(api_client, keys, webhook={"url": "http://127.0.0.1:9/hooks"})
    assert api_client.post(f"/runs/{run['id']}/cancel", headers=headers).status_code == 202
    schedule = api_client.post("/schedules", json={"agent": "demo", "cron": "0 9 * * *", "timezone": "Europe/Berlin"},
                               headers=headers).json()  # fmt: skip
    tab: Tab = tab_factory()
    tab.sign_in(keys.tenant_key, "tenant")
    page = tab.page
    try:
        tab.open_run(run["id"])
        deliveries = page.locator("section.deliveries")
        expect(deliveries).to_be_visible()
        expect(deliveries).to_contain_text("run.cancelled")
        expect(deliveries).to_contain_text("ConnectError")
        page.get_by_role("link", name="Schedules").click()
        row = page.locator(f'tr[data-id="{schedule["id"]}"]')
        expect(row).to_contain_text("0 9 * * *")
        expect(row).to_contain_text("Europe/Berlin")
        tab.shot("schedules")
    finally:
        api_client.delete(f"/schedules/{schedule['id']}", headers=headers)


def test_waiting_runs_are_listed_and_answered_in_the_browser(tab_factory: Any, keys: Keys, api_client: httpx.Client) -> None:
    approval = create_run(api_client, keys, input={"prompt": "Ship the release?", "steps": 0, "wait": "approval"})
    question = create_run(api_client, keys, input={"prompt": "How many?", "steps": 0, "wait": "count"})
    tab: Tab = tab_factory()
    page = tab.page
    tab.sign_in(keys.tenant_key, "tenant")
    waiting_chip = page.locator('.chip[data-status="waiting"]')
    expect(waiting_chip.locator(".chip-count")).not_to_have_text("0")
    waiting_chip.click()
    expect(page.get_by_role("link", name=approval["id"][:8])).to_be_visible()

    tab.open_run(approval["id"])
    expect(status_badge(page)).to_have_text("waiting")
    panel = page.locator(".waitpoint")
    expect(panel.get_by_role("heading")).to_have_text("Waiting for approval")
    expect(panel.locator(".json")).to_contain_text("Ship the release?")
    expect(page.locator(".marker-waiting")).to_have_text("Waiting for approval")
    publish(tab.shot("run-waiting"), "run-waiting.png")
    panel.get_by_role("button", name="Approve").click()
    expect(status_badge(page)).to_have_text("done")
    expect(page.locator(".waitpoint")).to_be_hidden()
    expect(page.locator(".marker-resumed")).to_contain_text('{"approved":true}')
    done = api_client.get(f"/runs/{approval['id']}", headers=keys.headers(keys.tenant_key)).json()
    assert done["output"]["resumed_with"] == {"approved": True}

    # Any other wait takes a JSON value, checked before it is sent; the admin answers through /admin's token.
    admin: Tab = tab_factory()
    admin.sign_in(keys.admin_key, "admin")
    admin.open_run(question["id"])
    box = admin.page.get_by_label("Value (JSON)")
    expect(admin.page.locator(".waitpoint h2")).to_have_text("Waiting for input: count")
    box.fill("{not json")
    admin.page.get_by_role("button", name="Resume").click()
    expect(admin.page.locator(".waitpoint [role=alert]")).to_contain_text("not JSON")
    box.fill('{"n": 5}')
    admin.page.get_by_role("button", name="Resume").click()
    expect(status_badge(admin.page)).to_have_text("done")
    assert event_types(api_client, keys, question["id"]).count("run.resumed") == 1
    answered = api_client.get(f"/runs/{question['id']}", headers=keys.headers(keys.tenant_key)).json()
    assert answered["output"]["resumed_with"] == {"n": 5}
