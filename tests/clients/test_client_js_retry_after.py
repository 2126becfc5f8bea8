"""``/client.js`` reads a 429's Retry-After (Node, with a fetch that answers what the API does at
a tenant limit): the error carries it, and the follower waits that long instead of its back-off."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.api_support import ROOT

SCRIPT = """
const { retryAfterMs, resumeRun, RunqError } = await import(process.argv[1]);
globalThis.fetch = async () => new Response(JSON.stringify({ code: "too_many_pending", detail: "full" }), {
  status: 429, headers: { "Retry-After": "3", "Content-Type": "application/problem+json" },
});
let error;
try { await resumeRun("r1", {}, { token: "t" }); } catch (e) { error = e; }
console.log(JSON.stringify({
  seconds: retryAfterMs("2"), date: retryAfterMs(new Date(Date.now() + 60_000).toUTCString()) > 50_000,
  none: retryAfterMs(null), junk: retryAfterMs("soon"),
  error: [error instanceof RunqError, error.status, error.code, error.retryAfterMs],
}));
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node")
def test_client_js_reads_retry_after() -> None:
    module = (ROOT / "app" / "ui" / "client.js").as_uri()
    result = subprocess.run(["node", "--input-type=module", "-e", SCRIPT, module], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "seconds": 2000, "date": True, "none": None, "junk": None, "error": [True, 429, "too_many_pending", 3000],
    }  # fmt: skip
