"""``@ag-ui/client``'s ``HttpAgent`` against a live runq (tests/node/ag-ui.test.mjs): text, tool
calls, an interrupt and its resume, a cancel, a repeated ``runId``, and a dropped stream resumed
with runq's extension, each passing the client's own verification."""

from __future__ import annotations

import subprocess

from tests.api_support import ApiProcess
from tests.protocols.conftest import node_env, run_node


def test_the_official_ag_ui_client_runs_against_runq(
    api: ApiProcess, worker: subprocess.Popen[bytes], api_key: str
) -> None:
    run_node("ag-ui.test.mjs", node_env(api, api_key))
