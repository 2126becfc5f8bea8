"""Run a runq process (``uvicorn app.main:app`` or ``app.worker``) with its spans kept by the
SDK's in-memory exporter and appended to a JSON-lines file as they end, so a test can follow one
trace across processes:

    python -m tests.fakes.traced SPANS_FILE SERVICE_NAME MODULE [ARGS...]
"""

from __future__ import annotations

import json
import runpy
import sys
from collections.abc import Sequence
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from app import tracing


class FileBackedExporter(InMemorySpanExporter):
    """The SDK's in-memory exporter that also appends each finished span to a file at once (a
    process stopped by a signal runs no exit hook)."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self._path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self._path.open("a") as out:
            for span in spans:
                context = span.get_span_context()
                assert context is not None
                line = {
                    "name": span.name,
                    "service": span.resource.attributes.get("service.name"),
                    "trace_id": format(context.trace_id, "032x"),
                    "span_id": format(context.span_id, "016x"),
                    "parent_id": format(span.parent.span_id, "016x") if span.parent else None,
                    "attributes": dict(span.attributes or {}),
                }
                out.write(json.dumps(line, default=str) + "\n")
        return super().export(spans)


def main() -> None:
    spans_file, service, module, *args = sys.argv[1:]
    # the process's own configure() is then a no-op
    tracing.configure(service, exporters=[FileBackedExporter(Path(spans_file))])
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
