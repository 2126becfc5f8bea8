"""The Alembic migrations: they match the metadata, and they go down and up again cleanly."""

from __future__ import annotations

import uuid

from alembic import command
from sqlalchemy.engine import make_url

from app.db.migrate import alembic_config, upgrade
from tests.conftest import _admin


def test_migrations_match_the_metadata(database_url: str) -> None:
    command.check(alembic_config(database_url))  # raises when autogenerate would add anything


def test_downgrade_to_base_and_upgrade_again(server_url: str) -> None:
    name = f"runq_migrate_{uuid.uuid4().hex[:8]}"
    _admin(server_url, f'CREATE DATABASE "{name}"')
    url = make_url(server_url).set(database=name).render_as_string(hide_password=False)
    try:
        upgrade(url)
        command.downgrade(alembic_config(url), "base")
        upgrade(url)
        command.check(alembic_config(url))
    finally:
        _admin(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
