"""The queue's SQL, read once from the named blocks of ``app/queue/sql/*.sql``.

Each statement is written out whole in those files (procrastinate's ``queries.sql`` layout)::

    -- name: claim_batch
    -- One line on the state change it makes.
    WITH ... ;

so it can be read, reviewed and EXPLAINed where it is defined. ``${events_channel}`` and its
siblings stand for the channel names of :mod:`app.queue.channels`, filled in at load time, so
that the names are defined once. ``tests/golden/queue_sql.txt`` holds every statement as sent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

from sqlalchemy import TextClause, text

from app.queue.channels import CANCEL, EVENTS, RUNS, WEBHOOKS

_NAME = re.compile(r"^-- name: (\w+)\n", re.MULTILINE)
_CHANNELS = {
    "${events_channel}": EVENTS,
    "${runs_channel}": RUNS,
    "${cancel_channel}": CANCEL,
    "${webhooks_channel}": WEBHOOKS,
}


@dataclass(frozen=True, slots=True)
class Block:
    """One named statement: the file it is in, its one-line description and its SQL."""

    name: str
    file: str
    description: str
    sql: str


def _parse(file: str, source: str) -> list[Block]:
    parts = _NAME.split(source)  # [preamble, name, body, name, body, ...]
    blocks = []
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = body.strip().splitlines()
        description = []
        while lines and lines[0].startswith("-- "):
            description.append(lines.pop(0)[3:])
        sql = "\n".join(lines).strip().removesuffix(";")
        if not sql or ";" in re.sub(r"--[^\n]*|'[^']*'", "", sql):
            raise ValueError(f"{file}: block {name} must hold exactly one statement")
        for placeholder, channel in _CHANNELS.items():
            sql = sql.replace(placeholder, channel)
        if "${" in sql:
            raise ValueError(f"{file}: block {name} names an unknown placeholder")
        blocks.append(Block(name, file, " ".join(description), sql))
    return blocks


def _load() -> dict[str, Block]:
    blocks: dict[str, Block] = {}
    for entry in sorted(resources.files("app.queue").joinpath("sql").iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".sql"):
            for block in _parse(entry.name, entry.read_text(encoding="utf-8")):
                if block.name in blocks:
                    raise ValueError(f"{entry.name}: statement {block.name} is defined twice")
                blocks[block.name] = block
    return blocks


BLOCKS = _load()
_used: set[str] = set()


def statement(name: str) -> TextClause:
    """The named statement, ready to execute (raises ``KeyError`` at import for a typo)."""
    _used.add(name)
    return text(BLOCKS[name].sql)


_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]*$")
_LITERAL = re.compile(r"^'[^']*'$")


@dataclass(frozen=True, slots=True)
class Template:
    """A DDL block with ``{field}`` slots: DDL takes no bind parameters (``{partition}``...)."""

    name: str
    sql: str

    def fill(self, **fields: str) -> TextClause:
        """The statement with its slots filled. Every value must be a plain lower-case
        identifier or a literal made by :func:`quote_literal`; anything else raises, so no
        text from outside ever ends up in DDL."""
        for value in fields.values():
            if not (_IDENTIFIER.match(value) or _LITERAL.match(value)):
                raise ValueError(f"{self.name}: {value!r} is neither an identifier nor a quoted literal")
        return text(self.sql.format(**fields))


def template(name: str) -> Template:
    """The named DDL template (raises ``KeyError`` at import for a typo)."""
    _used.add(name)
    return Template(name, BLOCKS[name].sql)


def quote_literal(value: str) -> str:
    """``value`` as an SQL string literal (no quote inside: bounds and names never have one)."""
    if "'" in value:
        raise ValueError(f"{value!r} cannot be a literal here")
    return f"'{value}'"


def unused() -> set[str]:
    """Statements defined in the files that no module asked for (dead SQL)."""
    return set(BLOCKS) - _used
