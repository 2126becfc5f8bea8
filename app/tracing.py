"""OpenTelemetry traces, when the ``otel`` extra is installed and the standard variables ask for them.

Off unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_TRACES_EXPORTER`` is set (and
``OTEL_SDK_DISABLED`` is not ``true``); everything else (service name, resource attributes,
sampler, the OTLP endpoint, protocol and headers) is the SDK's own reading of the ``OTEL_*``
variables. Nothing here imports ``opentelemetry`` until :func:`configure` finds tracing asked
for, so runq without the extra never needs it (tests/unit/test_tracing_absent.py); every helper
below is a no-op while tracing is off.

A run's trace starts at the request that created it: ``traceparent`` (W3C trace context) is
stored on the run, and each attempt in a worker is a span under it, with the claim, the model
calls (model, tokens) and the tool calls (name, exit code) below the attempt (docs/usage.md).
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from fastapi import FastAPI
    from opentelemetry.sdk.trace.export import SpanExporter

log = logging.getLogger(__name__)

_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")
_tracer: Any = None  # an opentelemetry Tracer once configured


def requested() -> bool:
    """Whether the environment asks for traces (the standard variables only)."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    return bool(os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()) or exporter not in ("", "none")


def enabled() -> bool:
    return _tracer is not None


def configure(service_name: str, *, exporters: Sequence[SpanExporter] | None = None) -> bool:
    """Install the process's tracer provider and the HTTP client (aiohttp for the model calls,
    httpx for webhooks) and asyncpg instrumentations, once.

    ``exporters`` replaces the ones ``OTEL_TRACES_EXPORTER`` names (the tests' in-memory
    exporter); without it, nothing happens unless :func:`requested`. True once tracing is on.
    """
    global _tracer
    if _tracer is not None:
        return True
    if exporters is None and not requested():
        return False
    try:
        from opentelemetry import trace
        from opentelemetry.instrumentation.aiohttp_client import AioHttpClientInstrumentor
        from opentelemetry.instrumentation.asyncpg import AsyncPGInstrumentor
        from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
        from opentelemetry.sdk.resources import OTELResourceDetector, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    except ImportError as exc:
        log.warning("OTEL_* asks for traces, but the otel extra is not installed (pip install 'runq[otel]'): %s", exc)
        return False
    # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win over the default name
    resource = Resource.create({"service.name": service_name}).merge(OTELResourceDetector().detect())
    provider = TracerProvider(resource=resource)  # the sampler from OTEL_TRACES_SAMPLER
    if exporters is not None:
        for exporter in exporters:
            provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        for exporter in _exporters_from_environment():
            provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    AioHttpClientInstrumentor().instrument()
    HTTPXClientInstrumentor().instrument()
    AsyncPGInstrumentor().instrument()
    _tracer = trace.get_tracer("runq")
    log.info("tracing on: spans of %s exported", service_name)
    return True


def _exporters_from_environment() -> list[SpanExporter]:
    """The exporters ``OTEL_TRACES_EXPORTER`` names (default ``otlp``; over gRPC unless
    ``OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL`` says ``http/protobuf``), as the SDK finds them."""
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    found = []
    for name in os.environ.get("OTEL_TRACES_EXPORTER", "otlp").split(","):
        name = name.strip()
        if name == "otlp":
            name = "otlp_proto_http" if (protocol or "").strip().startswith("http") else "otlp_proto_grpc"
        if name in ("", "none"):
            continue
        entries = list(entry_points(group="opentelemetry_traces_exporter", name=name))
        if not entries:
            log.warning("OTEL_TRACES_EXPORTER names %r, which no installed package provides", name)
            continue
        found.append(entries[0].load()())
    return found


def instrument_app(app: FastAPI) -> None:
    """Server spans for every request, continuing the caller's ``traceparent`` header."""
    if _tracer is not None:
        from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

        FastAPIInstrumentor.instrument_app(app, excluded_urls="healthz,readyz,metrics")


def run_traceparent(header: str | None) -> str | None:
    """The ``traceparent`` a new run stores: the request span's while tracing is on (a child
    of the caller's), else the caller's own header when it is well-formed."""
    if _tracer is not None:
        from opentelemetry.propagate import inject

        carrier: dict[str, str] = {}
        inject(carrier)
        if carrier.get("traceparent"):
            return carrier["traceparent"]
    if header is not None and _TRACEPARENT.match(header.strip().lower()):
        return header.strip().lower()
    return None


def trace_id() -> str | None:
    """The current span's trace id (32 hex digits) for log lines, while tracing is on."""
    if _tracer is None:
        return None
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else None


class Span(Protocol):
    """What runq's code does with a span (the SDK's, or a no-op while tracing is off)."""

    def set_attribute(self, key: str, value: Any) -> None: ...

    def set_attributes(self, attributes: Mapping[str, Any]) -> None: ...


class _NoSpan(AbstractContextManager["_NoSpan"]):
    """The span, and its context manager, while tracing is off: one shared object, so that a
    run pays next to nothing for the spans it would have."""

    def __exit__(self, *exc: object) -> None:
        return None

    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        pass


_NO_SPAN = _NoSpan()


def span(
    name: str,
    *,
    traceparent: str | None = None,
    attributes: Mapping[str, Any] | None = None,
    start_ns: int | None = None,
) -> AbstractContextManager[Span]:
    """A span around the block (the current one while it runs), under ``traceparent`` when
    given (a run's stored trace context) or else under the current span; a no-op while off."""
    if _tracer is None:
        return _NO_SPAN
    context = None
    if traceparent is not None:
        from opentelemetry.propagate import extract

        context = extract({"traceparent": traceparent})
    manager: AbstractContextManager[Span] = _tracer.start_as_current_span(
        name, context=context, attributes=dict(attributes or {}), start_time=start_ns
    )
    return manager


def record_span(
    name: str, *, start_ns: int, end_ns: int, attributes: Mapping[str, Any] | None = None
) -> None:
    """A span that already happened, under the current one (a claim: one statement for many
    runs, so each run's attempt gets its own span of it)."""
    if _tracer is not None:
        _tracer.start_span(name, attributes=dict(attributes or {}), start_time=start_ns).end(end_time=end_ns)


def start_span(name: str, *, parent: Any = None, attributes: Mapping[str, Any] | None = None) -> Any:
    """A span started now and ended by :func:`end_span`, under ``parent`` (a span this
    returned) or else under the current one, without becoming current (another framework's
    spans, which open and close in callbacks); ``None`` while tracing is off."""
    if _tracer is None:
        return None
    from opentelemetry import trace

    context = trace.set_span_in_context(parent) if parent is not None else None
    return _tracer.start_span(name, context=context, attributes=dict(attributes or {}))


def end_span(span: Any, *, attributes: Mapping[str, Any] | None = None, error: str | None = None) -> None:
    """End a span of :func:`start_span`, with its last attributes and, if it failed, why."""
    from opentelemetry.trace import Status, StatusCode

    span.set_attributes(dict(attributes or {}))
    if error is not None:
        span.set_status(Status(StatusCode.ERROR, error))
    span.end()


def detach() -> None:
    """No current span for the rest of this task (a task shared by many runs, such as the
    worker's batched writes, must not put its statements into the trace of the run that
    happened to start it)."""
    if _tracer is not None:
        from opentelemetry import context

        context.attach(context.Context())


def now_ns() -> int:
    return time.time_ns()
