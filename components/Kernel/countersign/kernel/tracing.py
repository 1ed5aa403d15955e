"""Traces (OpenTelemetry): off unless a setting names an OTLP endpoint (Kernel SPEC, traces).

``configure_tracing(endpoint)`` sets this process's ``TracerProvider`` once: spans are batched
and exported over OTLP/HTTP (protobuf) to ``endpoint`` (``…/v1/traces`` is added when the URL
has no path). Without it no provider is set, OpenTelemetry's API hands out its no-op tracer, and a
span costs a context switch and nothing is kept or sent (BENCHMARKS.md, logs and traces).

Spans are opened where the work crosses a process or a network (GLOBAL_SPEC, logs and traces):
the API request (``countersign.api.observe``), Temporal's client and worker (temporalio's
``TracingInterceptor``, only when tracing is on), each n8n webhook call (its W3C
``traceparent`` header carries the trace into n8n) and each provider request sent from this
process. Span attributes are ids, names, statuses and times — never an argument, a body or a
secret.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter

__all__ = [
    "configure_tracing",
    "inject_trace_headers",
    "tracer",
    "traces_to",
    "tracing_enabled",
]

_LOCK = threading.Lock()


class _Fanout(SpanProcessor):
    """The provider's one processor: forwards ended spans to the processors of the moment (the
    exporter of the settings, and whatever a test attached with ``traces_to``)."""

    def __init__(self) -> None:
        self.processors: list[SpanProcessor] = []

    def on_end(self, span: ReadableSpan) -> None:
        for p in list(self.processors):
            p.on_end(span)

    def shutdown(self) -> None:
        for p in list(self.processors):
            p.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return all(p.force_flush(timeout_millis) for p in list(self.processors))


_STATE: dict[str, Any] = {"fanout": None}
#: the OTLP URLs this process exports to (one exporter each)
_EXPORTING: set[str] = set()


def tracing_enabled() -> bool:
    """Whether this process set a provider (an endpoint was configured, or a test listens)."""
    return _STATE["fanout"] is not None


def _install(service: str) -> _Fanout:
    with _LOCK:
        fanout: _Fanout | None = _STATE["fanout"]
        if fanout is None:
            fanout = _Fanout()
            provider = TracerProvider(resource=Resource.create({"service.name": service}))
            provider.add_span_processor(fanout)
            trace.set_tracer_provider(provider)
            _STATE["fanout"] = fanout
        return fanout


def _traces_url(endpoint: str) -> str:
    parts = urlsplit(endpoint)
    if parts.scheme not in {"http", "https"} or not parts.netloc:
        raise ValueError(f"the OTLP endpoint must be an http(s) URL, got {endpoint!r}")
    return endpoint if parts.path.strip("/") else endpoint.rstrip("/") + "/v1/traces"


def configure_tracing(endpoint: str | None, *, service: str = "countersign") -> bool:
    """Export this process's spans over OTLP/HTTP to ``endpoint``; with None, do nothing (the
    no-op tracer stays). Idempotent per endpoint; whether tracing is on.

    Raises:
        ValueError: ``endpoint`` is not an http(s) URL.
    """
    if not endpoint:
        return tracing_enabled()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
        OTLPSpanExporter,  # loaded only when tracing is on (its protobuf and requests)
    )

    url = _traces_url(endpoint)
    fanout = _install(service)
    with _LOCK:
        if url not in _EXPORTING:
            _EXPORTING.add(url)
            fanout.processors.append(BatchSpanProcessor(OTLPSpanExporter(endpoint=url)))
    return True


@contextmanager
def traces_to(exporter: SpanExporter, *, service: str = "countersign") -> Iterator[None]:
    """Within the block, every span this process ends is also given to ``exporter`` at once
    (a test's ``InMemorySpanExporter``); the provider stays set afterwards."""
    fanout = _install(service)
    processor = SimpleSpanProcessor(exporter)
    fanout.processors.append(processor)
    try:
        yield
    finally:
        fanout.processors.remove(processor)


def tracer(name: str) -> trace.Tracer:
    """The tracer of a module (the no-op one while no provider is set)."""
    return trace.get_tracer(name)


def inject_trace_headers(headers: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """Add the current span's W3C ``traceparent`` (and ``tracestate``) to ``headers``; nothing
    when no span is recording (tracing off)."""
    if trace.get_current_span().get_span_context().is_valid:
        propagate.inject(headers)
    return headers
