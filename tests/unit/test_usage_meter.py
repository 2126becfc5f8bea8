"""An attempt's usage: what is stored, what rides the next write, the max_tokens check, and the
per-tenant counters, counted only once a write stored the usage."""

from __future__ import annotations

import uuid

import pytest
from prometheus_client import REGISTRY

from app.agents.base import BudgetExceeded
from app.domain import Usage
from app.worker.usage import UsageMeter


def _counted(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_unstored_usage_is_counted_once_its_write_is_stored() -> None:
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    meter = UsageMeter(Usage(100, 10, 1, 1), tenant_id=tenant, budget={})
    meter.add(Usage(input_tokens=50, output_tokens=5, model_calls=1))
    snapshot = meter.unstored
    meter.add(Usage(tool_calls=1))  # while the statement is out

    assert _counted("runq_tokens_total", tenant=tenant, kind="input") == 0  # not stored yet
    meter.written(snapshot)

    assert meter.stored == Usage(150, 15, 2, 1)
    assert meter.unstored == Usage(tool_calls=1)  # rides the next write
    assert meter.total == Usage(150, 15, 2, 2)
    assert _counted("runq_tokens_total", tenant=tenant, kind="input") == 50
    assert _counted("runq_tokens_total", tenant=tenant, kind="output") == 5
    assert _counted("runq_model_calls_total", tenant=tenant) == 1
    assert _counted("runq_tool_calls_total", tenant=tenant) == 0


def test_max_tokens_counts_stored_and_unstored_tokens_of_every_attempt() -> None:
    meter = UsageMeter(Usage(90, 10), tenant_id="t", budget={"max_tokens": 120})
    meter.add(Usage(15, 5, 1))
    assert not meter.over_budget  # 120 is the limit, not past it
    meter.add(Usage(0, 1, 1))
    assert meter.over_budget
    assert meter.budget_message == "max_tokens of 120 passed (121 tokens used)"
    assert not UsageMeter(Usage(10**9, 0), tenant_id="t", budget={}).over_budget


def test_stored_usage_from_a_row() -> None:
    assert Usage.of({}) == Usage.of(None) == Usage()
    assert Usage.of({"input_tokens": 3, "tool_calls": 2}) == Usage(3, 0, 0, 2)
    assert Usage(1, 2, 3, 4).plus(Usage(1, 1, 1, 1)).minus(Usage(2, 3, 4, 5)) == Usage()


def test_turns_and_tool_calls_count_over_the_whole_run() -> None:
    """An earlier attempt's stored model calls are turns used; its tool calls are tool calls used."""
    meter = UsageMeter(Usage(model_calls=2, tool_calls=3), tenant_id="t", budget={"max_turns": 3, "max_tool_calls": 4})
    meter.count_turn()  # the third
    meter.count_tool_call()  # the fourth
    with pytest.raises(BudgetExceeded, match="max_turns of 3"):
        meter.count_turn()
    with pytest.raises(BudgetExceeded, match="max_tool_calls of 4"):
        meter.count_tool_call()


def test_a_figure_no_statement_could_add_up_is_refused() -> None:
    meter = UsageMeter(Usage(), tenant_id="t", budget={})
    for bad in (Usage(input_tokens=-1), Usage(output_tokens=2**60)):
        with pytest.raises(ValueError, match="whole numbers"):
            meter.record(bad)
    assert meter.unstored == Usage()
