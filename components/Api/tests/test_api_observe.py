"""Api SPEC, logs and traces: one JSON line per request (method, route template, status,
latency_ms, plan_id from the path; never the query string), and a server span per request when
tracing is on, continuing a caller's traceparent."""

from __future__ import annotations

import io
import json

from fastapi import FastAPI
from fastapi.testclient import TestClient
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from countersign.api.observe import Observe, plan_id_of
from countersign.kernel.logs import get_logger, logs_to
from countersign.kernel.tracing import traces_to

PLAN = "01JCZ3ABCDEFGHJKMNPQRSTVWX"


def _app() -> FastAPI:
    app = FastAPI(telemetry={"tracing": False})  # as create_app: the span is Observe's

    @app.post("/v1/plans/{plan_id}/execute")
    def execute(plan_id: str) -> dict[str, str]:
        get_logger("t").info("inside", step=1)
        return {"plan_id": plan_id}

    @app.get("/login")
    def login(token: str) -> dict[str, bool]:
        return {"ok": bool(token)}

    app.add_middleware(Observe)
    return app


def test_a_request_logs_one_line_with_its_plan_and_route() -> None:
    buf = io.StringIO()
    with logs_to(buf), TestClient(_app()) as c:
        assert c.post(f"/v1/plans/{PLAN}/execute").status_code == 200
        assert c.get("/login", params={"token": "cs_" + "x" * 43}).status_code == 200
    lines = [json.loads(x) for x in buf.getvalue().splitlines()]
    inside, request, login = lines
    assert inside["event"] == "inside" and inside["plan_id"] == PLAN  # bound for the request
    assert request["event"] == "http.request" and request["plan_id"] == PLAN
    assert request["route"] == "/v1/plans/{plan_id}/execute" and request["status"] == 200
    assert request["method"] == "POST" and isinstance(request["latency_ms"], float)
    assert login["route"] == "/login" and "cs_" not in buf.getvalue()


def test_a_request_is_a_server_span_that_continues_the_callers_trace() -> None:
    exporter = InMemorySpanExporter()
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with traces_to(exporter), TestClient(_app()) as c:
        c.post(f"/v1/plans/{PLAN}/execute", headers={"traceparent": parent})
        c.get("/login", params={"token": "cs_" + "x" * 43})
    # a login link's token is in its query: no span keeps the query
    assert all("cs_" not in str(dict(s.attributes or {})) for s in exporter.get_finished_spans())
    (span,) = [s for s in exporter.get_finished_spans() if s.name.startswith("POST")]
    assert span.name == "POST /v1/plans/{plan_id}/execute"
    assert format(span.context.trace_id, "032x") == "0af7651916cd43dd8448eb211c80319c"
    assert span.attributes is not None and span.attributes["countersign.plan_id"] == PLAN
    assert span.attributes["http.response.status_code"] == 200


def test_plan_id_of_reads_only_a_plan_path() -> None:
    assert plan_id_of(f"/v1/plans/{PLAN}") == PLAN
    assert plan_id_of(f"/v1/plans/{PLAN}/gates/gate-A/approve") == PLAN
    assert plan_id_of("/v1/plans/not-a-plan/execute") is None
    assert plan_id_of("/v1/intents") is None
