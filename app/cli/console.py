"""Terminal output for the operator commands: aligned tables for people, JSON for scripts."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from app.domain import Usage

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(value: str) -> float:
    """``30d``, ``12h``, ``90m``, ``45s`` or plain seconds → seconds (an argparse ``type``, so
    a bad value is reported with this message rather than argparse's generic one)."""
    match = _DURATION.match(value)
    if not match:
        raise argparse.ArgumentTypeError(f"not a duration: {value!r} (use e.g. 30d, 12h, 90m, 45s)")
    return float(match[1]) * _UNIT_S[match[2]]


def parse_json(value: str) -> Any:
    """An argparse type: one JSON value (``--value '{"approved": true}'``)."""
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from exc


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, tuple) and hasattr(value, "_asdict"):  # a NamedTuple, e.g. Usage
        return _plain(value._asdict())
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)


def print_json(value: Any) -> None:
    json.dump(_plain(value), sys.stdout, indent=2)
    sys.stdout.write("\n")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)


def print_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> None:
    """Left-aligned columns sized to their content."""
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    for line in ([c.upper() for c in columns], *cells):
        print("  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip())
    if not rows:
        print("(none)")


_QUEUE_ERRORS: dict[str, str] = {
    "RunNotFound": "no run with id {}",
    "RunFinished": "run {} has already finished",
    "NotRequeueable": "run {} is neither dead nor cancelled, so it cannot be requeued",
    "NotWaiting": "run {} is not waiting (or that waitpoint is no longer its open one)",
    "ThreadNotFound": "no thread with id {}",
}


def describe_error(exc: BaseException) -> str:
    """One line for the user, without a traceback (``runq --debug`` shows that)."""
    from pydantic import ValidationError
    from sqlalchemy.exc import DBAPIError

    from app.db.errors import database_down
    from app.guards.redact import redact

    if isinstance(exc, ValidationError):
        problems = "; ".join(
            (f"RUNQ_{'_'.join(map(str, e['loc'])).upper()}: " if e["loc"] else "")
            + e["msg"].removeprefix("Value error, ")
            for e in exc.errors()
        )
        return f"configuration error: {problems}"
    if type(exc).__name__ in _QUEUE_ERRORS:
        return _QUEUE_ERRORS[type(exc).__name__].format(exc)
    if database_down(exc):
        return f"cannot reach the database: {redact(_first_line(exc))}"
    if isinstance(exc, DBAPIError) and getattr(exc.orig, "sqlstate", None) == "42P01":
        return "the database has no runq tables yet: run `runq migrate`"
    if isinstance(exc, LookupError | ImportError | RuntimeError | ValueError):
        return redact(_first_line(exc))
    return f"unexpected {type(exc).__name__}: {redact(_first_line(exc))} (rerun with --debug for the traceback)"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def describe_usage(usage: Usage) -> str:
    """A run's usage on one line (``runs show``)."""
    return (
        f"{usage.input_tokens} input + {usage.output_tokens} output tokens,"
        f" {usage.model_calls} model calls, {usage.tool_calls} tool calls"
    )
