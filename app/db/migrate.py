"""Apply the Alembic migrations programmatically (``runq migrate``, ``runq dev``, the tests)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

ROOT = Path(__file__).resolve().parents[2]


def alembic_config(url: str) -> Config:
    config = Config(str(ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(ROOT / "alembic"))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    config.attributes["configure_logger"] = False
    return config


def upgrade(url: str) -> None:
    """Migrate the database at ``url`` to the newest revision."""
    command.upgrade(alembic_config(url), "head")
