"""Cli SPEC, ``countersign stats``: the service-level view from the API's real metrics text."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest
import typer
from prometheus_client import generate_latest
from typer.testing import CliRunner

from countersign.api.metrics import Metrics
from countersign.cli.stats import p95, render, service_view, stats_cmd


class _Events:
    def __init__(self, rows: list[dict[str, Any]] | None) -> None:
        self.rows = rows

    def open_ones(self, kind: str, *, until: str) -> list[dict[str, Any]]:
        assert (kind, until) == ("handed_off", "durable_finished")
        if self.rows is None:
            raise ConnectionError("database down")
        return self.rows


def _metrics(events: _Events | None = None) -> Metrics:
    m = Metrics()
    for i in range(100):  # previews of 10 … 1000 ms: 95 % are ≤ 950 ms
        m.engine("preview", (i + 1) / 100)
    for _ in range(19):
        m.engine("execute", 0.04)
    m.engine("execute", 4.0)  # one slow execute in 20: the p95 sits at the top of 25-50 ms
    for status, n in (("200", 50), ("201", 5), ("403", 3), ("409", 1), ("500", 2)):
        for _ in range(n):
            m.latency.labels("POST", "/v1/plans/{plan_id}/execute", status).observe(0.01)
    m.refusals.labels("token_expired").inc(2)
    m.refusals.labels("policy_refused").inc()
    m.refusals.labels("internal_error").inc(2)
    m.chat_refusal("cannot", "weather")
    if events is not None:
        m.count_durable(events)
    return m


def test_the_view_from_real_metrics_text() -> None:
    running = [
        {"plan_id": "a", "details": {"workflow_id": "watch-a"}},
        {"plan_id": "b", "details": {"workflow_id": "watch-b"}},
        {"plan_id": "c", "details": {"workflow_id": "plan-c"}},
    ]
    view = service_view(generate_latest(_metrics(_Events(running)).registry).decode())
    # preview: rank 95 of 100 falls in the (0.5, 1] bucket holding 50 → 0.5 + 0.5 * 45/50
    assert view.preview_p95_ms == 950.0 and view.previews == 100
    # execute: rank 19 of 20 is the last of the 19 in (0.025, 0.05] → 50 ms, not the 4 s one
    assert view.execute_p95_ms == 50.0 and view.executes == 20
    assert view.requests == 61
    assert view.errors_by_status == {"403": 3, "409": 1, "500": 2}
    assert view.errors_by_class == {"refused (4xx)": 4, "server (5xx)": 2}
    assert view.refusals_by_reason == {
        "token_expired": 2,
        "internal_error": 2,
        "policy_refused": 1,
        "chat:cannot:weather": 1,
    }
    assert (view.watchers, view.durable_plans) == (2, 1)
    text = render(view)
    assert "preview     950 ms (p95 of 100)" in text and "watchers    2 watching" in text


def test_an_idle_api_and_a_database_that_does_not_answer() -> None:
    view = service_view(generate_latest(Metrics().registry).decode())
    assert view.preview_p95_ms is None and view.requests == 0 and view.errors_by_class == {}
    assert view.watchers is None
    assert "no runs yet" in render(view) and "not reported" in render(view)
    down = service_view(generate_latest(_metrics(_Events(None)).registry).decode())
    assert down.watchers is None and down.preview_p95_ms == 950.0


def test_p95_of_buckets() -> None:
    inf = float("inf")
    assert p95([]) is None
    assert p95([(0.1, 0), (inf, 0)]) is None
    assert p95([(0.1, 10), (0.2, 20), (inf, 20)]) == pytest.approx(0.19)
    # beyond the last finite bound: that bound (as Prometheus answers)
    assert p95([(0.1, 1), (inf, 100)]) == 0.1


def test_text_that_is_not_metrics_is_refused() -> None:
    with pytest.raises(ValueError):
        service_view("this is { not prometheus")


def test_the_command_prints_the_view_of_a_served_api() -> None:
    text = generate_latest(_metrics().registry)

    class Api(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            ok = self.path == "/metrics"
            self.send_response(200 if ok else 404)
            self.end_headers()
            self.wfile.write(text if ok else b"")

        def log_message(self, *_: object) -> None:
            return None

    server = HTTPServer(("127.0.0.1", 0), Api)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    app = typer.Typer()
    app.command()(stats_cmd)
    url = f"http://127.0.0.1:{server.server_port}"
    try:
        shown = CliRunner().invoke(app, ["--url", url])
        as_json = CliRunner().invoke(app, ["--url", url, "--json"])
    finally:
        server.shutdown()
        server.server_close()
    assert shown.exit_code == 0 and "execute     50 ms (p95 of 20)" in shown.output
    assert json.loads(as_json.output)["preview_p95_ms"] == 950.0
    down = CliRunner().invoke(app, ["--url", url])  # the server is gone
    assert down.exit_code == 1 and "cannot read" in down.output
