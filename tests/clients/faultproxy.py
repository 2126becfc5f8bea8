"""A TCP proxy on 127.0.0.1 that cuts connections on purpose, for the client tests.

Each connection is given a budget of bytes it may carry from the server to the client
(``budget()``; None is unlimited); once spent, both sides are closed mid-stream, wherever that
falls: inside the HTTP headers, a chunk-size line, an SSE field, a UTF-8 character. A budget of
0 forwards the request, waits for the server's first answer byte and drops it: the server did
the work, the client never hears about it.

With ``stall=True`` a spent budget closes nothing: the proxy keeps both connections open, reads
and discards what the server sends (so the server sees a healthy client) and forwards nothing
more, not even keep-alives, until the client gives up on the connection: a half-open or stuck
connection, which only a client that watches for silence survives.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from contextlib import suppress

CHUNK = 65536


class FaultProxy:
    """Runs its own event loop in a thread, so sync and async tests can both use it."""

    def __init__(self, upstream_port: int, budget: Callable[[], int | None], *, stall: bool = False) -> None:
        self.upstream_port = upstream_port
        self.budget = budget
        self.stall = stall
        self.connections = 0
        self.cuts = 0
        self.stalls = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), self._loop
        ).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            assert self._server is not None
            self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def cut_all(self) -> None:
        """Drop every connection open now (new ones are served as before)."""

        async def cut() -> None:
            for writer in list(self._open):
                self._open.discard(writer)
                writer.transport.abort()
                self.cuts += 1

        asyncio.run_coroutine_threadsafe(cut(), self._loop).result(10)

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._open.add(client_writer)
        budget = self.budget()
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            client_writer.close()
            return
        to_server = asyncio.ensure_future(self._pipe(client_reader, upstream_writer, None))
        to_client = asyncio.ensure_future(self._pipe(upstream_reader, client_writer, budget))
        try:
            await asyncio.wait({to_server, to_client}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # the proxy is stopping
            to_server.cancel()
            to_client.cancel()
            return
        cut = to_client.done() and not to_client.cancelled() and to_client.result()
        if cut and self.stall:
            self.stalls += 1
            await self._stall(upstream_reader, to_server)
        elif cut and client_writer in self._open:
            self.cuts += 1
        self._open.discard(client_writer)
        for task in (to_server, to_client):
            task.cancel()
        for writer in (client_writer, upstream_writer):
            writer.close()
            with suppress(OSError, asyncio.CancelledError):
                await writer.wait_closed()

    @staticmethod
    async def _stall(upstream: asyncio.StreamReader, to_server: asyncio.Future[bool]) -> None:
        """Swallow the server's bytes until the client closes its side (the request pipe ends)."""
        swallow = asyncio.ensure_future(FaultProxy._pipe(upstream, None, None))
        try:
            await to_server
        finally:
            swallow.cancel()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter | None, budget: int | None) -> bool:
        """Copy until EOF (False) or until ``budget`` bytes are spent (True: a cut); with no
        ``writer``, read and discard."""
        try:
            while True:
                data = await reader.read(CHUNK)
                if not data:
                    return False
                if writer is None:
                    continue
                if budget is not None and len(data) >= budget:
                    writer.write(data[:budget])
                    await writer.drain()
                    return True
                if budget is not None:
                    budget -= len(data)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            return False
