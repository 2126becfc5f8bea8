"""Apply the Alembic migrations programmatically (``runq migrate``, ``runq dev``, the tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationInfo

ROOT = Path(__file__).resolve().parents[2]


def alembic_config(url: str) -> Config:
    config = Config(str(ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(ROOT / "alembic"))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    config.attributes["configure_logger"] = False
    return config


def upgrade(url: str) -> list[str]:
    """Migrate the database at ``url`` to the newest revision; ``revision: title`` of each
    migration applied (none when it was up to date)."""
    applied: list[str] = []

    def record(*, step: MigrationInfo, **_: Any) -> None:
        # up_revision is the migration's Script (typed as its base, Revision), whose doc is
        # the first paragraph of the file's docstring.
        applied.append(f"{step.up_revision_id}: {getattr(step.up_revision, 'doc', '')}")

    config = alembic_config(url)
    config.attributes["on_version_apply"] = record
    command.upgrade(config, "head")
    return applied
