"""The Alembic migrations: they match the metadata (index predicates too), they go down and up
again cleanly, and partitioning run_events (0011) keeps an existing database's every event, both
ways."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import asyncpg
from alembic import command
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from app.db.migrate import alembic_config, upgrade
from app.db.schema import metadata
from app.db.url import async_url, asyncpg_dsn
from tests.conftest import _admin


def test_migrations_match_the_metadata(database_url: str) -> None:
    command.check(alembic_config(database_url))  # raises when autogenerate would add anything


INDEXES = (
    "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'"
    " AND tablename <> 'alembic_version' AND tablename !~ '^run_events_' ORDER BY tablename, indexname"
)


def test_the_migrated_indexes_are_the_metadatas_with_their_predicates(
    server_url: str, direct_database_url: str
) -> None:
    """Alembic's check compares an index's columns, not its WHERE: the indexes the migrations
    built are compared, as PostgreSQL prints them, with those the metadata creates."""
    name = f"runq_metadata_{uuid.uuid4().hex[:8]}"
    _admin(server_url, f'CREATE DATABASE "{name}"')
    url = make_url(server_url).set(database=name).render_as_string(hide_password=False)

    async def indexes(url: str, *, create: bool = False) -> list[tuple[object, ...]]:
        engine = create_async_engine(async_url(url))
        try:
            async with engine.begin() as conn:
                if create:
                    await conn.run_sync(metadata.create_all)
                return [tuple(r) for r in await conn.execute(text(INDEXES))]
        finally:
            await engine.dispose()

    try:
        migrated, created = asyncio.run(indexes(direct_database_url)), asyncio.run(indexes(url, create=True))
        assert migrated == created
        assert any("WHERE (status <> 'leased'::text)" in str(definition) for *_, definition in migrated)
    finally:
        _admin(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def list_index_predicates(url: str) -> dict[str, str | None]:
    """The WHERE of the run lists' and the re-homing's indexes (migration 0021)."""
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        rows = await conn.fetch(
            "SELECT c.relname, pg_get_expr(i.indpred, i.indrelid) FROM pg_index i JOIN pg_class c"
            " ON c.oid = i.indexrelid WHERE c.relname = ANY($1::text[])",
            ["ix_agent_runs_created", "ix_agent_runs_tenant_created", "ix_agent_runs_unfinished"],
        )
        return {name: predicate for name, predicate in rows}
    finally:
        await conn.close()


def test_downgrade_to_base_and_upgrade_again(server_url: str) -> None:
    name = f"runq_migrate_{uuid.uuid4().hex[:8]}"
    _admin(server_url, f'CREATE DATABASE "{name}"')
    url = make_url(server_url).set(database=name).render_as_string(hide_password=False)
    try:
        upgrade(url)
        command.downgrade(alembic_config(url), "0020")  # leased runs back in the list indexes
        assert asyncio.run(list_index_predicates(url)) == {
            "ix_agent_runs_created": None,
            "ix_agent_runs_tenant_created": None,
            "ix_agent_runs_unfinished": "((status <> ALL (ARRAY['done'::text, 'dead'::text, 'cancelled'::text]))"
            " AND (history_at IS NOT NULL))",
        }
        command.downgrade(alembic_config(url), "base")
        upgrade(url)
        command.check(alembic_config(url))
        assert set(asyncio.run(list_index_predicates(url)).values()) == {
            "(status <> 'leased'::text)",
            "((status <> ALL (ARRAY['done'::text, 'dead'::text, 'cancelled'::text, 'leased'::text]))"
            " AND (history_at IS NOT NULL))",
        }
    finally:
        _admin(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


EVENTS_DIGEST = (
    "SELECT count(*), md5(string_agg(run_id::text || seq || type || data::text || attempt || created_at, ','"
    " ORDER BY run_id, seq)) FROM run_events"
)


def test_partitioning_an_existing_database_keeps_every_event_both_ways(server_url: str) -> None:
    """0007 with history → 0011 (run_events partitioned) → 0007 again: the same events each time."""
    name = f"runq_migrate_{uuid.uuid4().hex[:8]}"
    _admin(server_url, f'CREATE DATABASE "{name}"')
    url = make_url(server_url).set(database=name).render_as_string(hide_password=False)
    config = alembic_config(url)

    async def go(*statements: str) -> list[tuple[object, ...]]:
        conn = await asyncpg.connect(asyncpg_dsn(url))
        try:
            for sql in statements[:-1]:
                await conn.execute(sql)
            return [tuple(r) for r in await conn.fetch(statements[-1])]
        finally:
            await conn.close()

    try:
        command.upgrade(config, "0007")
        before = asyncio.run(
            go(
                "INSERT INTO agent_runs (tenant_id, agent, max_attempts, status, created_at, finished_at)"
                " SELECT 'acme', 'demo', 3, CASE WHEN i % 4 = 0 THEN 'pending' ELSE 'done' END,"
                " now() - make_interval(days => i % 40 + 1), CASE WHEN i % 4 = 0 THEN NULL ELSE now() END"
                " FROM generate_series(1, 400) AS i",
                "INSERT INTO run_events (run_id, seq, type, data, attempt, created_at)"
                " SELECT id, s, 'message.delta', jsonb_build_object('n', s), 1, created_at + make_interval(secs => s)"
                " FROM agent_runs, generate_series(1, 7) AS s",
                EVENTS_DIGEST,
            )
        )
        assert before[0][0] == 2800
        command.upgrade(config, "head")
        command.check(config)
        after = asyncio.run(go(EVENTS_DIGEST))
        homes = asyncio.run(
            go(
                "SELECT e.tableoid::regclass::text, count(*) FROM run_events e JOIN agent_runs r"
                " ON r.id = e.run_id AND r.history_at = e.history_at GROUP BY 1"
            )
        )
        assert after == before
        # the history so far sits in one partition, every event with its run's history_at
        assert [h for h, _ in homes] == [f"run_events_before_{datetime.now(UTC):%Y%m%d}"] and homes[0][1] == 2800
        command.downgrade(config, "0007")
        assert asyncio.run(go(EVENTS_DIGEST)) == before
        upgrade(url)
        assert asyncio.run(go(EVENTS_DIGEST)) == before
    finally:
        _admin(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
