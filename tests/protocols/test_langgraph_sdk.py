"""``@langchain/langgraph-sdk``'s ``Client`` (1.15, what ``useStream`` drives) against a live runq
(tests/node/langgraph-sdk.test.mjs): a thread, a streamed run of a graph with its modes and ids, a
stream joined with ``Last-Event-ID``, the store and crons."""

from __future__ import annotations

import subprocess

from tests.api_support import ApiProcess
from tests.protocols.conftest import node_env, run_node


def test_the_official_langgraph_js_client_runs_against_runq(
    api: ApiProcess, worker: subprocess.Popen[bytes], api_key: str
) -> None:
    run_node("langgraph-sdk.test.mjs", node_env(api, api_key))
