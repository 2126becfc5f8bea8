"""The README's chat walkthrough as a newcomer runs it: a fresh ``runq dev`` with no model key
(its development model answers), the example's session endpoint, the page in Chromium; and what
both sides say when the page's origin is not in ``RUNQ_CORS_ORIGINS``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from tests.api_support import ROOT, free_port
from tests.e2e.test_dev_session import _wait
from tests.e2e.test_doc_snippets import runq_dev

EXAMPLE = ROOT / "examples" / "chat"
README_INPUT = {"tools": ["shell"], "approve_tools": ["shell"]}  # RUNQ_CHAT_INPUT in the README


@contextmanager
def session_endpoint(env: dict[str, str], port: int) -> Iterator[Path]:
    """``node session-endpoint.js`` as the README starts it; yields the file its output goes to."""
    node = shutil.which("node")
    if node is None or not (EXAMPLE / "dist" / "index.html").is_file():
        pytest.fail("node and the built page are needed: make chat-example")
    out = Path(tempfile.mkstemp(prefix="runq-session-", suffix=".out")[1])
    with open(out, "w") as stdout:
        proc = subprocess.Popen(
            [node, "session-endpoint.js"],
            cwd=EXAMPLE,
            env=os.environ | env | {"PORT": str(port), "RUNQ_CHAT_INPUT": json.dumps(README_INPUT)},
            stdout=stdout,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait(lambda: "session endpoint on" in out.read_text(), 30, "the session endpoint up")
        yield out
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        out.unlink()


@pytest.mark.timeout(600)
def test_the_readme_chat_runs_without_a_key(browser: Browser) -> None:
    page_port, other_port = free_port(), free_port()
    page_url = f"http://127.0.0.1:{page_port}"
    with runq_dev({"RUNQ_CORS_ORIGINS": page_url}, {}) as env, session_endpoint(env, page_port) as said:
        context = browser.new_context()
        page = context.new_page()
        try:
            page.goto(page_url)
            page.get_by_role("textbox", name="Message").fill("Ask the shell: `wc -c /etc/hosts`")
            page.get_by_role("button", name="Send").click()
            tool = page.locator(".message-assistant .tool")
            expect(tool.get_by_role("button", name="Approve")).to_be_visible(timeout=30_000)
            expect(tool.locator(".tool-input")).to_contain_text("wc -c /etc/hosts")
            tool.get_by_role("button", name="Approve").click()
            expect(page.locator(".message-assistant .text")).to_contain_text("Done. shell returned", timeout=30_000)
            expect(tool.locator(".tool-output")).to_contain_text("/etc/hosts")
        finally:
            context.close()
        assert "RUNQ_CORS_ORIGINS" not in said.read_text()  # the page's origin is allowed

        # A page on an origin runq does not list: the session endpoint says what to set at once,
        # runq's log names the origin when the browser's preflight comes, and the page a sentence.
        other = f"http://127.0.0.1:{other_port}"
        with session_endpoint(env, other_port) as warned:
            _wait(lambda: f"RUNQ_CORS_ORIGINS={other}" in warned.read_text(), 30, "the CORS warning")
            context = browser.new_context()
            page = context.new_page()
            try:
                page.goto(other)  # the history's fetch is the first call to runq
                expect(page.get_by_role("alert")).to_contain_text(f"does its RUNQ_CORS_ORIGINS list {other}?")
            finally:
                context.close()
        log = Path(env["RUNQ_DATA_DIR"]).parent / "dev.out"
        _wait(lambda: f"RUNQ_CORS_ORIGINS={page_url},{other}" in log.read_text(), 10, "runq's log line")
