"""/docs and /redoc in Chromium with no network: every file comes from the API itself.

Swagger UI and ReDoc used to come from a CDN, so /docs was blank without internet. The tab
records every request that leaves the API's origin (127.0.0.1) and fails the test on one.
"""

from __future__ import annotations

from typing import Any

from playwright.sync_api import expect

from tests.ui.conftest import Tab


def test_swagger_ui_renders_the_operations_offline(tab_factory: Any) -> None:
    tab: Tab = tab_factory()
    page = tab.page
    page.goto(f"{tab.base_url}/docs")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("runq")
    create = page.locator(".opblock-post", has=page.locator(".opblock-summary-path[data-path='/runs']"))
    expect(create).to_be_visible()
    create.locator(".opblock-summary").click()  # expand it: the request body schema renders
    expect(create.locator(".opblock-body")).to_contain_text("agent")
    expect(page.locator(".opblock-get .opblock-summary-path[data-path='/runs/{run_id}/events']")).to_be_visible()


def test_redoc_renders_the_operations_offline(tab_factory: Any) -> None:
    tab: Tab = tab_factory()
    page = tab.page
    page.goto(f"{tab.base_url}/redoc")
    expect(page.get_by_role("heading", name="runq", exact=False).first).to_be_visible()
    expect(page.get_by_text("/runs/{run_id}/events").first).to_be_attached()
