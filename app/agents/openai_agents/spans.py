"""The SDK's traces and spans as runq's OpenTelemetry spans, under each run's attempt.

One processor serves the whole process (the SDK's processors are process-wide): a trace or span
the SDK opens becomes an OpenTelemetry span under its parent's, the trace's own under the span
current where the run started (the run's attempt, whose trace began at the request that created
the run). Only scalar fields of a span's data become attributes (its model, tool, agent names,
token counts): inputs and outputs stay out of the trace, as runq's own model spans keep them out.
The SDK's default export to OpenAI is replaced unless ``RUNQ_OPENAI_AGENTS_TRACE_EXPORT=true``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agents import TracingProcessor, add_trace_processor, set_trace_processors
from agents.tracing import Span, Trace

from app import tracing

_installed = False


class OpenTelemetrySpans(TracingProcessor):
    """Routes every SDK trace and span of the process to an OpenTelemetry span."""

    def __init__(self) -> None:
        self._open: dict[str, Any] = {}  # the SDK's trace and span ids -> open OpenTelemetry spans

    def on_trace_start(self, trace: Trace) -> None:
        span = tracing.start_span("openai_agents.trace", attributes={"openai_agents.workflow": trace.name})
        if span is not None:
            self._open[trace.trace_id] = span

    def on_trace_end(self, trace: Trace) -> None:
        span = self._open.pop(trace.trace_id, None)
        if span is not None:
            tracing.end_span(span)

    def on_span_start(self, span: Span[Any]) -> None:
        parent = self._open.get(span.parent_id or span.trace_id)
        started = tracing.start_span(f"openai_agents.{span.span_data.type}", parent=parent)
        if started is not None:
            self._open[span.span_id] = started

    def on_span_end(self, span: Span[Any]) -> None:
        started = self._open.pop(span.span_id, None)
        if started is None:
            return
        error = span.error
        tracing.end_span(
            started,
            attributes=_attributes(span.span_data.export()),
            error=None if error is None else error.get("message") or "error",
        )

    def shutdown(self) -> None:
        for span in self._open.values():
            tracing.end_span(span)
        self._open.clear()

    def force_flush(self) -> None:
        pass  # the OpenTelemetry provider's processors flush


def install_processor(*, export_to_openai: bool) -> None:
    """Route the SDK's spans to runq's traces, once per process."""
    global _installed
    if _installed:
        return
    _installed = True
    if export_to_openai:
        add_trace_processor(OpenTelemetrySpans())
    else:
        set_trace_processors([OpenTelemetrySpans()])


def _attributes(data: Mapping[str, Any]) -> dict[str, Any]:
    """A span's data as attributes: its scalar fields, and a dict's (usage) one level down;
    never a tool's or a model's input or output (they may hold what the redactor keeps out of
    runq's own tables)."""
    attributes: dict[str, Any] = {}
    for key, value in data.items():
        if key in ("input", "output"):
            continue
        if isinstance(value, str | int | float | bool):
            attributes[f"openai_agents.{key}"] = value
        elif isinstance(value, Mapping):
            attributes |= {f"openai_agents.{key}.{k}": v for k, v in value.items() if isinstance(v, str | int | float | bool)}
    return attributes
