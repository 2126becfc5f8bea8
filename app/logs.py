"""Structured logs on stderr: JSON lines when not a terminal, carrying the run they concern.

Every line passes through the one secret redactor on its way out, whoever logged it: uvicorn's
access log would otherwise write each ``?token=`` stream token in full, and an exception can
carry an ``Authorization`` header or a URL with its password.

Fields such as ``worker_id`` and ``run_id`` live in a context variable, so every log line of a
run's task (and of the tasks it starts) carries them without being passed around; while tracing
is on, a line logged inside a span also carries its ``trace_id``.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Literal

from app import tracing
from app.guards.redact import Redactor

_fields: ContextVar[dict[str, Any]] = ContextVar("runq_log_fields", default={})  # noqa: B039 - never mutated


@contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Add ``fields`` to every log record emitted inside the block (and its tasks)."""
    token = _fields.set({**_fields.get(), **fields})
    try:
        yield
    finally:
        _fields.reset(token)


class _ContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        fields = _fields.get()
        trace_id = tracing.trace_id()  # None while tracing is off
        record.runq = fields if trace_id is None else {**fields, "trace_id": trace_id}
        return True


_redactor = Redactor()  # no path roots: a log line keeps its paths


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": _redactor.text(record.getMessage()),
            **{k: str(v) for k, v in getattr(record, "runq", {}).items()},
        }
        if record.exc_info:
            line["exc"] = _redactor.text(self.formatException(record.exc_info))
        return json.dumps(line, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(f"{k}={v}" for k, v in getattr(record, "runq", {}).items())
        text = _redactor.text(super().format(record))
        return f"{text} [{fields}]" if fields else text


POOL_LOGGERS = ("sqlalchemy.pool", "app.db.engine.BoundedPool")


def configure_logging(fmt: Literal["auto", "json", "text"] = "auto", level: int | str = logging.INFO) -> None:
    """Send every log record to stderr; stdout stays free for a command's real output."""
    json_lines = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if json_lines else TextFormatter())
    handler.addFilter(_ContextFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper() if isinstance(level, str) else level)
    # uvicorn installs text handlers of its own; its lines, the access log included, go
    # through ours instead, so an API process writes one format.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        server_log = logging.getLogger(name)
        server_log.handlers.clear()
        server_log.propagate = True
    # SQLAlchemy's pools (and app/db/engine.py's BoundedPool, which logs under its own class
    # name) say "Pool disposed" / "Pool recreating" at info on every shutdown: bookkeeping, not
    # news. Their warnings (a connection invalidated, checked in dirty) still show.
    for name in POOL_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
