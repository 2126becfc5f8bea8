"""Alembic environment: migrates the database named by ``sqlalchemy.url`` or the settings."""

from __future__ import annotations

import asyncio
from logging.config import fileConfig

from alembic import context
from sqlalchemy.engine import Connection

from app.db.engine import create_engine
from app.db.schema import EVENT_PARTITION, metadata
from app.db.url import async_url

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name)


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url")
    if url:
        return url
    from app.settings import get_settings

    configured = get_settings().database_url
    if not configured:
        raise SystemExit("RUNQ_DATABASE_URL is not set (use `runq migrate`, which starts the embedded server)")
    return configured


def _include_name(name: str | None, type_: str, parent_names: object) -> bool:
    """run_events' partitions are made and dropped by the reaper, not by migrations."""
    return not (type_ == "table" and name is not None and EVENT_PARTITION.match(name))


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        compare_type=True,
        include_name=_include_name,
        # `runq migrate` passes a callback to report each migration it applied.
        on_version_apply=config.attributes.get("on_version_apply", ()),
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_async() -> None:
    # runq's own engine: the host list is tried as every other connection tries it.
    engine = create_engine(_url(), pool_size=1, application_name="runq-migrate")
    async with engine.connect() as connection:
        await connection.run_sync(_run)
    await engine.dispose()


if context.is_offline_mode():
    context.configure(url=async_url(_url()), target_metadata=metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    asyncio.run(_run_async())
