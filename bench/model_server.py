"""``python -m bench.model_server --port P --per-s R --seconds S``: a fake OpenAI-compatible
model for the streaming bench, in a process of its own so its CPU is counted apart from the
harness's subscribers and from runq.

Every ``POST /v1/chat/completions`` streams ``R * S`` text tokens, one every ``1/R`` s on an
absolute schedule (a late tick never pushes the others back), as chat.completion.chunk SSE
events, then ``finish_reason: stop`` and ``[DONE]``. Each token's text is ``"<i>@<µs>;"``: its
index in the reply and ``time.time()`` in microseconds just before it was written, so a
subscriber at the other end of runq can tell a lost, repeated or reordered token, and its
latency, from the text alone. Plain asyncio streams and HTTP/1.1 keep-alive, no framework: at
200 streams of 20 tokens/s this process writes 4,000 chunks a second on the cores it measures.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from app.devmodel.wire import DONE as DONE_EVENT
from app.devmodel.wire import Chunks

TOKEN = "{index}@{micros};"
CHUNKS = Chunks("bench", chunk_id="chatcmpl-bench", created=0)


def parse_token(text: str) -> tuple[int, int]:
    """``(index, emitted µs)`` of one token written by this server (without its ``;``)."""
    index, _, micros = text.partition("@")
    return int(index), int(micros)


def _chunk(delta: dict[str, object], finish_reason: str | None = None) -> bytes:
    return _http_chunk(CHUNKS.event(delta, finish_reason))


def _http_chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)
DONE = _http_chunk(DONE_EVENT) + b"0\r\n\r\n"


class ModelServer:
    def __init__(self, *, per_s: float, seconds: float) -> None:
        self.tokens = max(1, round(per_s * seconds))
        self.interval_s = 1.0 / per_s

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:  # keep-alive: the agent's pooled client sends its next turn here
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                await reader.readexactly(length)
                await self._stream(writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client hung up (a cancelled run closes its stream mid-reply)
        finally:
            writer.close()

    async def _stream(self, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        writer.write(HEAD + _chunk({"role": "assistant", "content": ""}))
        start = loop.time()
        for index in range(self.tokens):
            await asyncio.sleep(max(0.0, start + index * self.interval_s - loop.time()))
            text = TOKEN.format(index=index, micros=time.time_ns() // 1000)
            writer.write(_chunk({"content": text}))
            await writer.drain()
        writer.write(_chunk({}, "stop") + DONE)
        await writer.drain()


async def serve(port: int, *, per_s: float, seconds: float) -> None:
    model = ModelServer(per_s=per_s, seconds=seconds)
    server = await asyncio.start_server(model.handle, "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.model_server", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--per-s", type=float, required=True, help="tokens per second per stream")
    parser.add_argument("--seconds", type=float, required=True, help="length of every reply")
    args = parser.parse_args()
    asyncio.run(serve(args.port, per_s=args.per_s, seconds=args.seconds))


if __name__ == "__main__":
    main()
