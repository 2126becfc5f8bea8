"""A TCP proxy that follows Patroni's leader: the second way ``make failover`` points runq at
the pair, as HAProxy does with a health check on Patroni's REST ``GET /primary``.

Each new connection goes to the node whose Patroni said 200 at the last poll; connections
already open stay where they are (as with HAProxy without ``on-marked-down
shutdown-sessions``), so runq sees what a stale route gives it: a dead socket, or a server
that answers read-only.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from bench.failover.patroni import Node
from bench.server import free_port

POLL_S = 0.1
CHUNK = 64 * 1024


@asynccontextmanager
async def leader_proxy(leader: Callable[[], Node | None]) -> AsyncIterator[int]:
    """Listen on a free port of 127.0.0.1 (yielded) until the block ends; ``leader`` is asked
    every POLL_S (in a thread: it may block on HTTP)."""
    target: list[Node | None] = [None]

    async def follow() -> None:
        while True:
            target[0] = await asyncio.to_thread(leader)
            await asyncio.sleep(POLL_S)

    async def serve(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        node = target[0]
        if node is None:
            client_writer.close()  # no leader known: refused, as HAProxy with no server up
            return
        try:
            server_reader, server_writer = await asyncio.open_connection("127.0.0.1", node.pg_port)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(_pipe(client_reader, server_writer), _pipe(server_reader, client_writer))

    port = free_port()
    follower = asyncio.create_task(follow(), name="proxy-follow")
    server = await asyncio.start_server(serve, "127.0.0.1", port)
    try:
        yield port
    finally:
        follower.cancel()
        server.close()
        with contextlib.suppress(asyncio.CancelledError):
            await follower


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until either side closes; then close the other direction too."""
    with contextlib.suppress(OSError):
        while chunk := await reader.read(CHUNK):
            writer.write(chunk)
            await writer.drain()
    writer.close()
