"""Structured logs: one JSON object per line with the run's context, uvicorn's lines included."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from app.logs import POOL_LOGGERS, configure_logging, log_context

LOGGERS = ("", "uvicorn", "uvicorn.error", "uvicorn.access", *POOL_LOGGERS)


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in LOGGERS]
    saved = [(logger, logger.handlers[:], logger.propagate, logger.level) for logger in loggers]
    yield
    for logger, handlers, propagate, level in saved:
        logger.handlers[:] = handlers
        logger.propagate = propagate
        logger.setLevel(level)


def lines(err: str) -> list[dict[str, str]]:
    return [json.loads(line) for line in err.splitlines()]


def test_json_lines_carry_the_run_context(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("json")
    with log_context(worker_id="host:1:ab"), log_context(run_id="r1", tenant_id="acme", attempt=2):
        logging.getLogger("app.worker.runner").info("run started (agent %s)", "demo")
    logging.getLogger("app.worker.runner").warning("outside")
    first, second = lines(capsys.readouterr().err)
    assert first["msg"] == "run started (agent demo)" and first["level"] == "info"
    assert {k: first[k] for k in ("worker_id", "run_id", "tenant_id", "attempt")} == {
        "worker_id": "host:1:ab", "run_id": "r1", "tenant_id": "acme", "attempt": "2",
    }  # fmt: skip
    assert "run_id" not in second


def test_uvicorn_lines_go_through_the_same_format(capsys: pytest.CaptureFixture[str]) -> None:
    access = logging.getLogger("uvicorn.access")
    access.addHandler(logging.StreamHandler())  # what uvicorn's own logging config installs
    access.propagate = False
    access.setLevel(logging.INFO)  # as `--log-level info` sets it
    configure_logging("json")
    access.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5", "GET", "/runs", "1.1", 200)
    (line,) = lines(capsys.readouterr().err)
    assert line["logger"] == "uvicorn.access" and line["msg"] == '127.0.0.1:5 - "GET /runs HTTP/1.1" 200'


async def test_a_shutdown_logs_no_pool_bookkeeping(capsys: pytest.CaptureFixture[str]) -> None:
    from app.db.engine import create_engine

    configure_logging("json")
    engine = create_engine("postgresql://127.0.0.1:1/none", pool_size=1)
    await engine.dispose()  # the pool logs "Pool disposed" and "Pool recreating" here at info
    logging.getLogger("sqlalchemy.pool").warning("a connection was invalidated")
    assert [line["msg"] for line in lines(capsys.readouterr().err)] == ["a connection was invalidated"]
