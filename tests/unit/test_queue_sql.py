"""The queue's SQL as it is sent, checked in: a change to a statement shows as a diff of real SQL.

After an intended change: ``RUNQ_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/unit/test_queue_sql.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import app.queue  # noqa: F401  (imports every module that names a statement)
from app.queue.statements import BLOCKS, unused

GOLDEN = Path(__file__).parent.parent / "golden" / "queue_sql.txt"


def render() -> str:
    parts = [
        f"-- {block.file}: {name}\n-- {block.description}\n{block.sql};\n"
        for name, block in sorted(BLOCKS.items())
    ]
    return "\n".join(parts)


def test_every_statement_matches_the_golden_file() -> None:
    rendered = render()
    if os.environ.get("RUNQ_UPDATE_GOLDEN"):
        GOLDEN.write_text(rendered, encoding="utf-8")
    assert rendered == GOLDEN.read_text(encoding="utf-8"), (
        "app/queue/sql/*.sql changed: review the diff and rerun with RUNQ_UPDATE_GOLDEN=1"
    )


def test_every_statement_is_used_and_described() -> None:
    assert unused() == set()
    assert all(block.description for block in BLOCKS.values())


def test_channel_names_are_filled_in() -> None:
    notifying = [b for b in BLOCKS.values() if "pg_notify" in b.sql]
    assert notifying
    assert all("pg_notify('runq_" in b.sql for b in notifying)
