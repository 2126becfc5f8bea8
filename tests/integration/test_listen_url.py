"""Behind a transaction-mode pooler, LISTEN takes RUNQ_LISTEN_DATABASE_URL (a session connection).

The pooled URL here carries an option only SQLAlchemy understands (PgBouncer setups disable
its statement cache so); a raw asyncpg connection refuses it, so LISTEN working at all shows
it did not use that URL.
"""

from __future__ import annotations

import asyncpg
import httpx
from sqlalchemy.engine import make_url

from app.domain import Status
from app.main import create_app
from app.queue import Queue
from app.settings import Settings
from tests.api_support import SECRET, wait_for
from tests.integration.test_worker_reconnect import LISTEN_APP, backends
from tests.worker_support import enqueue_demo, in_process_worker, wait_finished


def pooled(url: str) -> str:
    return make_url(url).update_query_dict({"prepared_statement_cache_size": "0"}).render_as_string(hide_password=False)


async def test_worker_listens_on_its_own_url(database_url: str, direct_database_url: str, queue: Queue) -> None:
    admin = await asyncpg.connect(direct_database_url)
    try:
        # Polling is slower than the test: only a NOTIFY can start the run in time.
        async with in_process_worker(pooled(database_url), poll_s=60, listen_database_url=direct_database_url):
            await wait_for(lambda: backends(admin, LISTEN_APP))
            run = await enqueue_demo(queue, steps=0)
            assert (await wait_finished(queue, run.id, within=5)).status is Status.DONE
    finally:
        await admin.close()


async def test_api_listens_on_its_own_url(database_url: str, direct_database_url: str) -> None:
    app = create_app(Settings(database_url=pooled(database_url), listen_database_url=direct_database_url, secret_key=SECRET))
    async with app.router.lifespan_context(app):
        await wait_for(lambda: _true(app.state.runtime.hub.connected.is_set()))
        transport = httpx.ASGITransport(app)
        async with httpx.AsyncClient(transport=transport, base_url="http://runq.test") as client:
            assert (await client.get("/readyz")).status_code == 200


async def _true(value: bool) -> bool:
    return value
