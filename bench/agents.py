"""Agents the bench registers through ``RUNQ_AGENTS`` (``stamp=bench.agents:StampAgent``)."""

from __future__ import annotations

import time
from typing import Any


class StampAgent:
    """Returns the moment the runtime started it: the far end of pickup latency.

    ``time.time()`` on the same host as the client that stamps the enqueue commit, so both
    ends of the interval come from one clock.
    """

    async def run(self, ctx: Any) -> dict[str, float]:
        return {"started_at": time.time()}
