"""The bench's langgraph-server rows: a skipped section says why, a measured one is runq ÷
`langgraph dev` per figure. Made-up numbers: the bench's figures are reported, never asserted."""

from __future__ import annotations

from typing import Any

from bench import report
from bench.langgraph_server import ratios


def _timings(first: float, end: float, cpu: float) -> dict[str, Any]:
    return {
        "first_token": {"p50_ms": first, "p99_ms": 2 * first},
        "end": {"p50_ms": end, "p99_ms": 2 * end},
        "cpu_us_per_token": cpu,
    }


def _server(first: float, end: float, cpu: float, last_byte: float) -> dict[str, Any]:
    reconnect = {"p50_ms": last_byte, "samples": 2, "whole_answers": 2}
    return {
        "one_at_a_time": _timings(first, end, cpu),
        "concurrent": _timings(first, end, 0),  # a phase too short for a /proc tick
        "reconnect": {"live": reconnect, "after_end": reconnect},
    }


SHAPE = {"tokens": 50, "token_ms": 5.0, "concurrency": 50, "cut_after": 10}


def _results(section: dict[str, Any]) -> dict[str, Any]:
    return {"meta": {"smoke": True}, "langgraph_server": section}


def test_runq_over_the_reference_per_figure_none_where_nothing_was_measured() -> None:
    section = {
        "shape": SHAPE,
        "runq": _server(10, 300, 500, 20),
        "reference": _server(40, 600, 250, 10),
    }
    section["ratios"] = ratios(section)
    assert section["ratios"]["one_at_a_time_first_token_p50"] == 0.25
    assert section["ratios"]["one_at_a_time_cpu_per_token"] == 2.0
    assert section["ratios"]["reconnect_after_end_last_byte_p50"] == 2.0
    assert section["ratios"]["concurrent_cpu_per_token"] is None
    results = _results(section)
    assert report.ratios(results)["langgraph_server_one_at_a_time_end_p99"] == 0.5
    table = report.table(results)
    assert "50 runs at once: first token p50 ms" in table
    assert "20 (2/2)" in table


def test_a_skipped_section_says_why_and_adds_no_ratio() -> None:
    results = _results({"shape": SHAPE, "skipped": "no reference venv"})
    assert "no reference venv" in report.table(results)
    assert not any(name.startswith("langgraph_server") for name in report.ratios(results))
