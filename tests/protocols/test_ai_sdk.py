"""The Vercel AI SDK v6 against a live runq (tests/node/ai-sdk.test.mjs): its transport, chunk
schema, stream reader and Chat class; the `openai` agent's approvals run on the fake model."""

from __future__ import annotations

import subprocess

from tests.api_support import ApiProcess
from tests.fakes.openai_server import FakeOpenAI, ToolCall, answer, calls
from tests.protocols.conftest import node_env, run_node


def test_the_ai_sdk_client_conforms(
    api: ApiProcess, worker: subprocess.Popen[bytes], model: FakeOpenAI, api_key: str
) -> None:
    model.script(
        # approval granted: the call, then the answer after the tool ran
        calls(ToolCall("call_yes", "shell", {"command": "echo approved"})),
        answer("it ran"),
        # approval denied: the model sees the denial and answers
        calls(ToolCall("call_no", "shell", {"command": "echo denied"})),
        answer("it did not run"),
    )
    result = run_node("ai-sdk.test.mjs", node_env(api, api_key))
    print(result.stdout[-3000:])
    assert not model._script, "every scripted model turn was used"
