"""runq without the ``otel`` extra: the API and the worker import, tracing stays off even when
OTEL_* asks for it, and every tracing helper is a no-op. Run in a subprocess in which importing
what the extra brings (the SDK, the exporters, the instrumentations) fails, as it does where the
extra is not installed (``opentelemetry-api`` itself comes with FastAPI)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.api_support import ROOT

WITHOUT_OTEL = textwrap.dedent(
    """
    import importlib.abc, os, sys

    class NoOpenTelemetry(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.startswith(EXTRA):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    EXTRA = ("opentelemetry.sdk", "opentelemetry.exporter", "opentelemetry.instrumentation")
    sys.meta_path.insert(0, NoOpenTelemetry())
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://127.0.0.1:4317"

    import app.main, app.worker.main, app.agents.openai  # create_app() ran: configure() too
    from app import tracing

    assert tracing.requested() and not tracing.enabled()
    assert tracing.configure("runq-test") is False
    with tracing.span("runq.attempt", traceparent="00-" + "a" * 32 + "-" + "b" * 16 + "-01") as span:
        span.set_attributes({"k": 1})
    tracing.record_span("runq.claim", start_ns=0, end_ns=1)
    tracing.detach()
    assert tracing.trace_id() is None
    header = "00-" + "c" * 32 + "-" + "d" * 16 + "-01"
    assert tracing.run_traceparent(header) == header and tracing.run_traceparent("junk") is None
    assert not [m for m in sys.modules if m.startswith(EXTRA)]
    print("ok")
    """
)

NOT_ASKED = textwrap.dedent(
    """
    import os, sys
    for name in [n for n in os.environ if n.startswith("OTEL_")]:
        del os.environ[name]
    import app.main, app.worker.main, app.agents.openai
    # installed or not, an OpenTelemetry module is loaded only when OTEL_* asks for traces
    extra = ("opentelemetry.sdk", "opentelemetry.exporter", "opentelemetry.instrumentation")
    assert not [m for m in sys.modules if m.startswith(extra)], sorted(sys.modules)
    print("ok")
    """
)


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_runq_runs_without_the_otel_extra() -> None:
    result = _python(WITHOUT_OTEL)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
    assert "the otel extra is not installed" in result.stderr  # said once, not a traceback


def test_no_sdk_is_loaded_unless_traces_are_asked_for() -> None:
    result = _python(NOT_ASKED)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
