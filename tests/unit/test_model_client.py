"""How the ``openai`` agent splits a model's SSE stream, whatever the reads bring."""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest

from app.agents.model_client import sse_data


def _response(*reads: bytes) -> Any:
    async def iter_any() -> AsyncIterator[bytes]:
        for data in reads:
            yield data

    return SimpleNamespace(content=SimpleNamespace(iter_any=iter_any))


async def _payloads(*reads: bytes) -> list[bytes]:
    return [payload async for payload in sse_data(_response(*reads))]


async def test_one_event_per_read() -> None:
    assert await _payloads(b'data: {"a":1}\n\n', b"data: [DONE]\n\n") == [b'{"a":1}', b"[DONE]"]


@pytest.mark.parametrize("sep", [b"\n", b"\r\n", b"\r"])
async def test_lines_split_across_reads_and_any_line_ending(sep: bytes) -> None:
    stream = b"".join(
        [b": keep-alive", sep, b"event: chunk", sep, b'data: {"text":"hel"}', sep, sep]
    )
    stream += b'data:{"text":"lo"}' + sep + sep + b"data: [DONE]"
    reads = [stream[i : i + 3] for i in range(0, len(stream), 3)]
    assert await _payloads(*reads) == [b'{"text":"hel"}', b'{"text":"lo"}', b"[DONE]"]


async def test_many_events_in_one_read() -> None:
    assert await _payloads(b"data: 1\n\ndata: 2\n\ndata: 3\n\n") == [b"1", b"2", b"3"]
