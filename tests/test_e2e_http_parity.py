"""Interactive and durable writes send the same bytes (issue 10, hole 11).

A write runs as an n8n HTTP Request node on the interactive path and as ``steps.http.http_call`` +
httpx in a Temporal activity. Both are fed the same registry op, arguments and settings, and a
recording server compares what arrives: method, path and query, the body byte for byte, and the
headers a provider acts on. Every HTTP-bound op of the registry is sent both ways, with argument
values chosen to stress encoding (spaces, ampersands, quotes, non-ASCII, expression syntax).
"""

from __future__ import annotations

import asyncio
import http.server
import threading
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from countersign.binding import render_data, resolve_step
from countersign.kernel import Plan, PlanStep, Policy
from countersign.n8n import N8nClient, N8nHandle
from countersign.planner import make_plan
from countersign.planner.testing import make_intent
from countersign.registry import Registry
from countersign.steps import N8nStepRunner, N8nTransport
from countersign.steps.http import http_call, send

#: headers a provider acts on; everything else (user-agent, accept, connection…) is the client's
COMPARED_HEADERS = ("content-type", "idempotency-key", "if-none-match", "if-match")
KEY = "01JDQ3Z0000000000000000001:5:" + "a" * 64
WRITTEN = datetime(2037, 11, 20, 9, 15, tzinfo=UTC)  # when the write is rendered (DTSTAMP)


class Recorder:
    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        rec = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _any(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                rec.seen.append(
                    {
                        "method": self.command,
                        "target": self.path,
                        "body": body,
                        "headers": {
                            k.lower(): v
                            for k, v in self.headers.items()
                            if k.lower() in COMPARED_HEADERS
                        },
                    }
                )
                status = 200
                if self.command == "GET" and "/calendar/" in self.path:  # a CalDAV collection
                    out = b"BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//cs//t//EN\r\nEND:VCALENDAR\r\n"
                    ctype = "text/calendar"
                elif self.command == "REPORT":  # a calendar-query: an empty window
                    out = b'<?xml version="1.0"?><multistatus xmlns="DAV:"/>'
                    ctype, status = "application/xml", 207
                else:
                    out = b'{"id": "r-1", "slots": [], "items": []}'
                    ctype = "application/json"
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_REPORT = _any  # noqa: N815

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def recorder() -> Any:
    r = Recorder()
    yield r
    r.server.shutdown()


def _args(names: list[str], text: str, url: str) -> dict[str, Any]:
    sample: dict[str, Any] = {
        "user": "alice@example.com",
        "uid": "u-1",
        "title": text,
        "start": "2037-11-23T14:00:00Z",
        "end": "2037-11-23T14:30:00Z",
        "time_min": "2037-11-23T13:00:00Z",
        "time_max": "2037-11-23T18:00:00Z",
        "organizer": "alice@example.com",
        "attendees": ["alice@example.com", "bob@example.com"],
        "query": text,
        "max_price": 80,
        "item": text,
        "quantity": 2,
        "line_id": "l-1",
        "order_id": "o-1",
        "customer": text,
        "max_total": 80,
        "consulate": "lisbon",
        "date_from": "2027-03-01T00:00:00Z",
        "date_to": "2027-03-31T00:00:00Z",
        "slot": {"id": "s-1", "start": "2027-03-02T09:00:00Z", "note": text},
        "booking_id": "b-1",
        "slot_id": "s-1",
        "url": url + "/things?q=1",
        "method": "POST",
        "json": {"text": text, "n": 1},
        "poll_interval_s": 60,
        "max_polls": 3,
        "max_lifetime_s": 600,
    }
    return {n: sample[n] for n in names if n in sample}


def _http_ops(registry: Registry) -> list[tuple[str, str]]:
    out = []
    for cid, conn in sorted(registry.connectors.items()):
        for name, op in sorted(conn.ops.items()):
            if op.node.type == "n8n-nodes-base.httpRequest":
                out.append((cid, name))
    return out


def _both_ways(
    n8n: N8nHandle, registry: Registry, recorder: Recorder, uses: str, call: str, text: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    op = registry.op(uses, call)
    args = _args([*op.args.required, *op.args.optional], text, recorder.url)
    step = PlanStep(
        step=5,
        mode="interactive",
        role=op.role,
        uses=uses,
        call=call,
        args=args,
        dry_run=op.safety == "read",
    )
    conf = {f"{k}_base_url": recorder.url for k in ("caldav", "shop", "visa")}
    plan = make_plan(
        make_intent("schedule_meeting"),
        [],
        registry,
        Policy(providers={"calendar": "caldav", "mail": "smtp", "chat": "slack"}),
    )
    assert isinstance(plan, Plan)

    async def via_n8n() -> None:
        async with N8nClient(n8n.base_url, n8n.api_key) as client:
            runner = N8nStepRunner(
                plan=plan,
                plan_hash="0" * 64,
                registry=registry,
                transport=N8nTransport(client),
                settings=conf,
                clock=lambda: WRITTEN,
            )
            prepared = await runner.prepare(step, {}, idempotency_key=KEY)
            await runner.send(prepared, write=op.safety == "write")

    before = len(recorder.seen)
    asyncio.run(via_n8n())
    node = resolve_step(step, registry)
    req = http_call(node, render_data(node, args, conf, idempotency_key=KEY, written_at=WRITTEN))
    send(req, timeout=10)
    got = recorder.seen[before:]
    assert len(got) == 2, got
    return got[0], got[1]


TRICKY = [
    "Sync",
    "Q&A / review: 50% done",
    'Team "sync", café ✓',
    "{{ $env }} ={{ 1+1 }}",
    "line one\nline two; with, commas",
]


@pytest.mark.parametrize("text", TRICKY)
def test_every_http_op_sends_the_same_request_both_ways(
    n8n: N8nHandle, registry: Registry, recorder: Recorder, text: str
) -> None:
    for uses, call in _http_ops(registry):
        a, b = _both_ways(n8n, registry, recorder, uses, call, text)
        assert (a["method"], a["target"]) == (b["method"], b["target"]), (uses, call)
        assert a["body"] == b["body"], (uses, call, a["body"][:200], b["body"][:200])
        assert a["headers"] == b["headers"], (uses, call)


class _Servers:
    """The fixtures the property test needs, printed without their fields (the n8n handle's
    API key must never reach a failure report)."""

    def __init__(self, n8n: N8nHandle, registry: Registry, recorder: Recorder) -> None:
        self.n8n, self.registry, self.recorder = n8n, registry, recorder

    def __repr__(self) -> str:
        return "<servers>"


@pytest.fixture
def servers(n8n: N8nHandle, registry: Registry, recorder: Recorder) -> _Servers:
    return _Servers(n8n, registry, recorder)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=40))
def test_any_text_reaches_the_provider_identically(servers: _Servers, text: str) -> None:
    n8n, registry, recorder = servers.n8n, servers.registry, servers.recorder
    for uses, call in (("caldav", "create_event"), ("shop.sandbox", "search"), ("http", "request")):
        if (uses, call) not in _http_ops(registry):
            continue
        a, b = _both_ways(n8n, registry, recorder, uses, call, text)
        assert (a["method"], a["target"], a["body"], a["headers"]) == (
            b["method"],
            b["target"],
            b["body"],
            b["headers"],
        ), (uses, call, text)
