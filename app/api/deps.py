"""What a request handler needs from the running app, as ``Annotated`` dependencies."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.ext.asyncio import AsyncEngine

from app.api.listener import EventHub
from app.api.presence import Presence
from app.api.stream import Page
from app.queue import Queue
from app.settings import Settings


@dataclass(frozen=True, slots=True)
class Runtime:
    """The per-process objects the lifespan creates and the routes share."""

    settings: Settings
    engine: AsyncEngine
    queue: Queue
    hub: EventHub[Page | None]
    presence: Presence
    sse_ping_s: float


async def get_runtime(request: Request) -> Runtime:
    # Dependencies are async on purpose: FastAPI runs a plain ``def`` on a worker thread.
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
