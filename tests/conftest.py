"""Test database: the embedded PostgreSQL by default, ``RUNQ_TEST_DATABASE_URL`` when set.

One server per session; a migrated template database is cloned once per session, and every
test starts from empty tables (TRUNCATE), so tests never see each other's runs. With
``RUNQ_TEST_PGBOUNCER=1`` runq's connections go through a real PgBouncer in transaction mode
(tests/pgbouncer_support.py); LISTEN, migrations and the tests' raw sessions go direct.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from app.backoff import RetryBackoff
from app.db.engine import create_engine
from app.db.migrate import upgrade
from app.db.url import asyncpg_dsn
from app.queue import Queue
from app.settings import get_settings
from tests import pgbouncer_support

TABLES = "langgraph_store_items, langgraph_checkpoint_writes, langgraph_checkpoints, tenant_usage_hourly, queue_samples, workers, thread_messages, threads, webhook_deliveries, webhook_secrets, schedules, run_events, run_checkpoints, run_effects, waitpoints, run_subscribers, agent_runs, api_keys, tenant_limits, tenant_buckets, stream_slots"


def _admin(url: str, sql: str) -> None:
    async def go() -> None:
        conn = await asyncpg.connect(asyncpg_dsn(url))
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(go())


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    """URL of a server we may create databases on."""
    configured = os.environ.get("RUNQ_TEST_DATABASE_URL")
    if configured:
        yield configured
        return
    from app.db.embedded import EmbeddedPostgres

    root = Path(tempfile.mkdtemp(prefix="runq-test-", dir="/tmp"))
    root.chmod(0o755)
    server = EmbeddedPostgres(root / "pgdata", fast=True)
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture(scope="session")
def direct_database_url(server_url: str) -> Iterator[str]:
    """A freshly migrated database of our own on that server, dropped at the end: the URL of
    PostgreSQL itself, for sessions (LISTEN, a test's own raw connection)."""
    name = f"runq_test_{uuid.uuid4().hex[:10]}"
    _admin(server_url, f'CREATE DATABASE "{name}"')
    url = make_url(server_url).set(database=name).render_as_string(hide_password=False)
    upgrade(url)
    try:
        yield url
    finally:
        _admin(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def database_url(server_url: str, direct_database_url: str) -> Iterator[str]:
    """runq's URL of that database: PostgreSQL itself, or a PgBouncer in front of it when
    ``RUNQ_TEST_PGBOUNCER=1`` (then, as in production, without prepared statements and with
    LISTEN on ``RUNQ_LISTEN_DATABASE_URL``, for this process and the ones it starts)."""
    if not pgbouncer_support.ENABLED:
        os.environ["RUNQ_DATABASE_URL"] = direct_database_url
        yield direct_database_url
        return
    with pgbouncer_support.PgBouncer(server_url) as bouncer:
        url = bouncer.url(make_url(direct_database_url).database or "")
        os.environ["RUNQ_DATABASE_URL"] = url
        os.environ["RUNQ_LISTEN_DATABASE_URL"] = direct_database_url
        os.environ["RUNQ_DB_PREPARED_STATEMENTS"] = "false"
        get_settings.cache_clear()
        yield url


@pytest.fixture(scope="session")
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database_url, pool_size=20)
    yield engine
    await engine.dispose()


@pytest.fixture(autouse=True)
async def _empty_tables(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    if "engine" in request.fixturenames:
        engine: AsyncEngine = request.getfixturevalue("engine")
        async with engine.begin() as conn:
            await conn.exec_driver_sql(f"TRUNCATE {TABLES}")
    yield


@pytest.fixture
def queue(engine: AsyncEngine) -> Queue:
    return Queue(engine, lease_s=30, retry=RetryBackoff(5, 300), priority_aging_s=60)
