"""runq's LangGraph saver against the conformance suite LangGraph publishes
(``langgraph-checkpoint-conformance``), as LangGraph's own AsyncPostgresSaver runs it in
``libs/checkpoint-postgres/tests/test_conformance.py``; then what the suite does not know of:
the lease fence and pruning."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import ProgressCallbacks
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.agents.langgraph import RunqSaver
from app.domain import LeaseLost
from app.queue import Fence, Queue
from app.settings import get_settings


async def test_the_whole_conformance_suite_passes(engine: AsyncEngine) -> None:
    @checkpointer_test(name="RunqSaver")
    async def runq_saver() -> AsyncIterator[RunqSaver]:
        yield RunqSaver(engine, keep=get_settings().langgraph_keep_checkpoints)

    report = await validate(runq_saver, progress=ProgressCallbacks.verbose())
    report.print_report()
    assert report.passed_all(), report.results
    assert all(result.detected for result in report.results.values())  # every capability


def _config(thread_id: str, checkpoint_id: str | None = None) -> dict:
    configurable = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}
