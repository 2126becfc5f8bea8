"""The queue's SQL, read once from the named blocks of ``app/queue/sql/*.sql``.

Each statement is written out whole in those files (procrastinate's ``queries.sql`` layout)::

    -- name: claim_batch
    -- One line on the state change it makes.
    WITH ... ;

so it can be read, reviewed and EXPLAINed where it is defined. ``${events_channel}`` and its
siblings stand for the channel names of :mod:`app.queue.channels`, filled in at load time, so
that the names are defined once. A piece that two statements share is written once as a
``-- part: name`` block (``sql/parts.sql``) and included as ``${part:name}``.
``tests/golden/queue_sql.txt`` holds every statement as sent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

from sqlalchemy import TextClause, text

from app.queue.channels import CANCEL, EVENTS, RUNS, WEBHOOKS

_NAME = re.compile(r"^-- (name|part): (\w+)\n", re.MULTILINE)
_PART = re.compile(r"\$\{part:(\w+)\}")
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


def _parse(file: str, source: str) -> list[tuple[str, Block]]:
    """The file's blocks, each with its kind: ``name`` (a statement) or ``part``."""
    pieces = _NAME.split(source)  # [preamble, kind, name, body, kind, name, body, ...]
    blocks = []
    for kind, name, body in zip(pieces[1::3], pieces[2::3], pieces[3::3], strict=True):
        lines = body.strip().splitlines()
        description = []
        while lines and lines[0].startswith("-- "):
            description.append(lines.pop(0)[3:])
        sql = "\n".join(lines).strip().removesuffix(";")
        if not sql or ";" in re.sub(r"--[^\n]*|'[^']*'", "", sql):
            raise ValueError(f"{file}: block {name} must hold exactly one statement")
        for placeholder, channel in _CHANNELS.items():
            sql = sql.replace(placeholder, channel)
        blocks.append((kind, Block(name, file, " ".join(description), sql)))
    return blocks


def _include(block: Block, parts: dict[str, Block], used: set[str], within: tuple[str, ...] = ()) -> Block:
    """The statement with its ``${part:name}`` filled in, each part's later lines indented to
    where it stands, so the statement as sent reads as if written out whole. A part may
    include another (``within``: the parts being filled around it, so a cycle raises)."""

    def fill(match: re.Match[str]) -> str:
        if match[1] not in parts or match[1] in within:
            raise ValueError(f"{block.file}: block {block.name} names an unknown or circular part {match[1]}")
        used.add(match[1])
        part = _include(parts[match[1]], parts, used, (*within, block.name))
        indent = " " * (match.start() - (block.sql.rfind("\n", 0, match.start()) + 1))
        return f"-- part: {match[1]}\n{part.sql}".replace("\n", "\n" + indent)

    sql = _PART.sub(fill, block.sql)
    if "${" in sql:
        raise ValueError(f"{block.file}: block {block.name} names an unknown placeholder")
    return Block(block.name, block.file, block.description, sql)


def _load() -> tuple[dict[str, Block], set[str]]:
    """Every statement with its parts filled in, and the names of parts none includes."""
    statements: dict[str, Block] = {}
    parts: dict[str, Block] = {}
    for entry in sorted(resources.files("app.queue").joinpath("sql").iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".sql"):
            for kind, block in _parse(entry.name, entry.read_text(encoding="utf-8")):
                found = statements if kind == "name" else parts
                if block.name in found:
                    raise ValueError(f"{entry.name}: {kind} {block.name} is defined twice")
                found[block.name] = block
    included: set[str] = set()
    statements = {name: _include(block, parts, included) for name, block in statements.items()}
    return statements, set(parts) - included


BLOCKS, _UNUSED_PARTS = _load()
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
    """Statements that no module asked for and parts that no statement includes (dead SQL)."""
    return (set(BLOCKS) - _used) | _UNUSED_PARTS
