"""Python client for runq: create agent runs, follow their events, wait, resume and cancel.

``Client`` blocks, ``AsyncClient`` is for asyncio; both take ``(base_url, api_key)``.
"""

from runq_client._async import AsyncClient
from runq_client._sync import Client
from runq_client._version import __version__
from runq_client.calls import RetryPolicy
from runq_client.errors import RunqConnectionError, RunqError, RunqTimeout
from runq_client.models import (
    Event,
    EventPage,
    Message,
    Page,
    Run,
    StreamToken,
    Thread,
    ThreadToken,
    Waitpoint,
)

__all__ = [
    "AsyncClient",
    "Client",
    "Event",
    "EventPage",
    "Message",
    "Page",
    "RetryPolicy",
    "Run",
    "RunqConnectionError",
    "RunqError",
    "RunqTimeout",
    "StreamToken",
    "Thread",
    "ThreadToken",
    "Waitpoint",
    "__version__",
]
