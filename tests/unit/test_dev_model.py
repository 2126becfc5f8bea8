"""The development model's answers (app/devmodel/replies.py): the convention docs/dev-model.md
states, one request body at a time, and its wire format through a real client."""

from __future__ import annotations

import json
from typing import Any

import httpx

from app.devmodel.replies import answer
from app.devmodel.server import ModelServer


def tool(name: str, **params: str) -> dict[str, Any]:
    properties = {p: {"type": t} for p, t in params.items()}
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": properties, "required": list(params)}}}


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def test_a_named_tool_is_called_with_arguments_from_the_message() -> None:
    tools = [tool("order_status", order_id="string"), tool("refund", order_id="string", amount="number")]
    status = answer({"messages": [user("What is the order status of order 42?")], "tools": tools})
    assert [(c.name, c.arguments) for c in status.tool_calls] == [("order_status", {"order_id": "42"})]
    refund = answer({"messages": [user("Refund order 42, it arrived broken")], "tools": tools})
    assert [(c.name, c.arguments) for c in refund.tool_calls] == [("refund", {"order_id": "42", "amount": 42.0})]


def test_backticks_fill_a_string_and_call_names_a_tool_with_json() -> None:
    shell = [tool("shell", command="string")]
    quoted = answer({"messages": [user("Ask the shell: `wc -c /etc/hosts`")], "tools": shell})
    assert quoted.tool_calls[0].arguments == {"command": "wc -c /etc/hosts"}
    explicit = answer({"messages": [user('please call shell {"command": "date"}')], "tools": shell})
    assert explicit.tool_calls[0].arguments == {"command": "date"}


def test_tool_results_are_answered_in_text_so_the_loop_ends() -> None:
    messages = [
        user("Refund order 7"),
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "refund", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "refunded 7"},
    ]
    reply = answer({"messages": messages, "tools": [tool("refund", order_id="string")]})
    assert reply.text == "Done. refund returned: refunded 7." and not reply.tool_calls
    assert reply.usage == (5, 5)  # words in (3 + 2), words out


def test_without_a_named_tool_it_echoes_and_says_what_it_is() -> None:
    reply = answer({"messages": [user("hello there")], "tools": [tool("shell", command="string")]})
    assert reply.text.startswith("You said: hello there") and "development model" in reply.text
    forced = answer({"messages": [user("hi")], "tools": [tool("final_result", answer="string")], "tool_choice": "required"})
    assert forced.tool_calls[0].name == "final_result"


def test_it_streams_chat_completions_with_usage_and_answers_unstreamed() -> None:
    body = {"model": "any", "messages": [user("hello")], "stream": True, "stream_options": {"include_usage": True}}
    with ModelServer() as server, httpx.Client(base_url=server.base_url, timeout=10) as client:
        with client.stream("POST", "/chat/completions", json=body) as response:
            lines = [line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: ")]
        plain = client.post("/chat/completions", json=body | {"stream": False}).json()
        models = client.get("/models").json()
    assert lines[-1] == "[DONE]"
    chunks = [json.loads(line) for line in lines[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == plain["choices"][0]["message"]["content"] and text.startswith("You said: hello")
    assert chunks[-1]["usage"] == plain["usage"] == {"prompt_tokens": 1, "completion_tokens": len(text.split()), "total_tokens": 1 + len(text.split())}
    assert models["data"][0]["id"] == "runq-dev"
