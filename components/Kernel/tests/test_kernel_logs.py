"""Kernel SPEC, logs and traces: JSON lines, the secret filter, the level gate, the no-op tracer
and the OTLP endpoint setting."""

from __future__ import annotations

import base64
import io
import json
import secrets
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
import structlog
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from countersign.kernel.logs import REDACTED, configure_logging, get_logger, logs_to, redact_text
from countersign.kernel.tracing import (
    _traces_url,
    inject_trace_headers,
    tracer,
    traces_to,
)

API_KEY = "cs_" + secrets.token_urlsafe(32)
APPROVAL = "cst_" + secrets.token_urlsafe(32)
SIGNATURE = base64.b64encode(secrets.token_bytes(64)).decode()
SEED = base64.b64encode(secrets.token_bytes(32)).decode()
JWT = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJhYmMifQ.c2lnbmF0dXJlLXBhcnQ"


def _lines(buf: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in buf.getvalue().splitlines()]


def test_a_line_is_json_with_time_level_and_the_bound_context() -> None:
    buf = io.StringIO()
    with logs_to(buf), structlog.contextvars.bound_contextvars(plan_id="01PLAN", route="/x"):
        get_logger("t").info("step.sent", step=2, op="calendar.create_event", latency_ms=12)
    (line,) = _lines(buf)
    assert line["event"] == "step.sent" and line["level"] == "info"
    assert line["plan_id"] == "01PLAN" and line["step"] == 2 and line["latency_ms"] == 12
    assert str(line["timestamp"]).endswith("Z") and "T" in str(line["timestamp"])


def test_no_secret_survives_by_key_or_by_shape() -> None:
    buf = io.StringIO()
    with logs_to(buf):
        get_logger("t").warning(
            "everything",
            token="plain-looking",
            password="hunter2",
            headers={"Authorization": "Basic Zm9vOmJhcg==", "Cookie": "s=1", "X-N8N-API-KEY": JWT},
            note=f"sent Bearer {API_KEY} then /login?token={API_KEY} and {APPROVAL}",
            signature_b64=SIGNATURE,
            items=[SIGNATURE, SEED, bytes.fromhex("ab" * 64).hex(), JWT],
            pem="-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEI\n-----END PRIVATE KEY-----",
            idempotency_key="01PLAN:2:" + "f" * 64,
            plan_hash="e" * 64,
        )
    text = buf.getvalue()
    for secret in (API_KEY, APPROVAL, SIGNATURE, SEED, JWT, "hunter2", "ab" * 64, "MC4CAQ"):
        assert secret not in text, secret
    (line,) = _lines(buf)
    assert line["token"] == REDACTED and line["password"] == REDACTED
    assert line["headers"] == {
        "Authorization": REDACTED,
        "Cookie": REDACTED,
        "X-N8N-API-KEY": REDACTED,
    }
    # ids and hashes stay readable: they are what a person follows a plan by
    assert line["idempotency_key"] == "01PLAN:2:" + "f" * 64 and line["plan_hash"] == "e" * 64


def test_redact_text_keeps_ordinary_words() -> None:
    text = "gate-A approved for 01JCZ3 at 13:00, n8n_api_error, idempotency_outcome_unknown"
    assert redact_text(text) == text


def test_below_the_level_nothing_is_written() -> None:
    buf = io.StringIO()
    with logs_to(buf, level="warning"):
        get_logger("t").info("quiet")
        get_logger("t").error("loud")
    assert [line["event"] for line in _lines(buf)] == ["loud"]
    with pytest.raises(ValueError, match="log level"):
        configure_logging("chatty")


def test_traces_reach_a_listener_and_carry_into_headers() -> None:
    exporter = InMemorySpanExporter()
    with traces_to(exporter), tracer("t").start_as_current_span("outer"):
        headers = inject_trace_headers({})
        with tracer("t").start_as_current_span("inner"):
            pass
    assert headers["traceparent"].startswith("00-")
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"outer", "inner"}
    inner, outer = spans["inner"], spans["outer"]
    assert inner.parent is not None and inner.parent.span_id == outer.context.span_id
    assert format(outer.context.trace_id, "032x") in headers["traceparent"]


def test_without_a_span_no_header_is_added() -> None:
    assert trace.get_current_span().get_span_context().is_valid is False
    assert inject_trace_headers({}) == {}


def test_the_endpoint_gets_the_traces_path_and_must_be_http() -> None:
    assert _traces_url("http://127.0.0.1:4318") == "http://127.0.0.1:4318/v1/traces"
    assert _traces_url("https://otel.example/v1/traces") == "https://otel.example/v1/traces"
    with pytest.raises(ValueError, match="OTLP endpoint"):
        _traces_url("127.0.0.1:4318")


def test_an_endpoint_receives_the_spans_over_otlp_http(tmp_path: Path) -> None:
    """In a fresh process (one provider per process): ``configure_tracing`` with a collector's
    URL POSTs the spans as OTLP protobuf to ``/v1/traces``; without a URL nothing is sent."""
    got: list[tuple[str, str, bytes]] = []

    class Collector(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            got.append((self.path, self.headers["Content-Type"], body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *_: object) -> None:
            return None

    server = HTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    script = (
        "import sys\n"
        "from opentelemetry import trace\n"
        "from countersign.kernel.tracing import configure_tracing, tracer\n"
        "on = configure_tracing(sys.argv[1] or None, service='t')\n"
        "with tracer('t').start_as_current_span('exported-span'):\n"
        "    pass\n"
        "if on:\n"
        "    trace.get_tracer_provider().force_flush()\n"
        "print(on)\n"
    )
    url = f"http://127.0.0.1:{server.server_port}"
    try:
        for arg in ("", url):
            out = subprocess.run(
                [sys.executable, "-c", script, arg],
                check=False,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert out.returncode == 0, out.stderr
            assert out.stdout.strip() == str(bool(arg))
    finally:
        server.shutdown()
    (path, ctype, body) = got[0]
    assert len(got) == 1 and path == "/v1/traces" and ctype == "application/x-protobuf"
    assert b"exported-span" in body
