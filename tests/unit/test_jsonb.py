"""jsonb texts read and written again without loss, whatever orjson cannot take."""

from __future__ import annotations

import json

import pytest

from app.api.protocols.ag_ui_events import Segment, translate_page
from app.api.protocols.ai_sdk_chunks import ChunkMapper, frames
from app.db import jsonb

BIG = 123456789012345678901234567890  # past 64 bits: orjson would read a float


@pytest.mark.parametrize(
    "text",
    ['{"n": 123456789012345678901234567890}', '{"tiny": 0.000000000000000000000000000001}', '{"a": [1, "x", null]}'],
)
def test_loads_reads_what_json_reads(text: str) -> None:
    assert jsonb.loads(text) == json.loads(text)


def test_an_infinite_number_is_read_as_json_reads_it() -> None:
    assert jsonb.loads('{"a":1e400}') == {"a": float("inf")}


def test_dumps_writes_an_integer_past_64_bits() -> None:
    assert jsonb.dumps({"n": BIG, "s": "é"}) == f'{{"n":{BIG},"s":"é"}}'.encode()


def test_a_tool_output_past_64_bits_reaches_both_protocols_exactly() -> None:
    call = '{"name": "count", "arguments": {"n": 1}, "tool_call_id": "c1"}'
    result = f'{{"name": "count", "output": {{"n": {BIG}}}, "is_error": false, "tool_call_id": "c1"}}'
    events = [(1, "tool.call", call), (2, "tool.result", result)]

    ai_sdk = frames(ChunkMapper(run_id="run"), events).decode()
    ag_ui = translate_page(Segment("t", "r", "run"), events).decode()

    assert f'"output":{{"n":{BIG}}}' in ai_sdk
    assert f'"content":"{{\\"n\\":{BIG}}}"' in ag_ui
