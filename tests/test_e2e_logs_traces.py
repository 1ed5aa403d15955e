"""GLOBAL_SPEC, logs and traces, on the real stack (API, PostgreSQL, n8n, Radicale, SMTP): a whole
meeting — sign in by a login link, plan, preview, approve, execute — with every log line of the
process captured and every span kept.

- Every line is one JSON object; every line that names a plan step or a plan event carries
  ``plan_id``; the plan's events, its n8n calls and provider requests are among them.
- No secret appears anywhere in the lines or the spans' attributes: the API keys, the approval
  token, the login link's token, the session and CSRF cookies, n8n's API key, the signing seed
  (base64 and hex), the public key, the plan's signature.
- One execute request is one trace: the request's span is the root of the step runtime's n8n
  calls, and the n8n calls carried that trace in their ``traceparent``.
"""

from __future__ import annotations

import base64
import io
import json
import threading
from datetime import UTC, datetime
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from countersign.api.testing import ALICE, BOB, ApiHarness, meeting_body
from countersign.api.users import UserStore
from countersign.cli.stats import service_view
from countersign.kernel.logs import logs_to
from countersign.kernel.tracing import traces_to
from countersign.n8n import N8nHandle
from countersign.signer import KeyRing

pytestmark = pytest.mark.slow


class _Lines(io.StringIO):
    """A stream several threads write whole lines to (the server's thread, the test's)."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def write(self, s: str) -> int:
        with self._lock:
            return super().write(s)


def _meeting(api: ApiHarness, link_token: str) -> dict[str, Any]:
    """Sign in by the link, then plan, preview, approve and execute a meeting; what the run
    handed out (the secrets the logs must not hold, and the plan's ids)."""
    seen: dict[str, Any] = {}
    with api.client(None, follow_redirects=False) as anon:
        assert anon.get("/login", params={"token": link_token}).status_code == 200
        r = anon.post("/login", data={"token": link_token})
        assert r.status_code == 303, r.text
        seen["cookies"] = [v for v in r.cookies.values() if len(v) >= 20]
    with api.client() as c:
        r = c.post("/v1/intents", json=meeting_body("Traced", day=3, hours=3))
        assert r.status_code == 201, r.text
        seen["plan_id"], seen["signature"] = r.json()["plan_id"], r.json()["signature"]
        plan = f"/v1/plans/{seen['plan_id']}"
        assert c.post(f"{plan}/preview").status_code == 200
        slot = c.get(plan).json()["gates"][0]["choices"]["options"][0]
        r = c.post(f"{plan}/gates/gate-A/approve", json={"choice": slot["value"]})
        assert r.status_code == 200, r.text
        seen["approval"] = r.json()["token"]
        r = c.post(f"{plan}/execute", json={"tokens": {"gate-A": seen["approval"]}})
        assert r.status_code in (200, 202) and r.json()["status"] == "completed", r.text
    assert len(api.radicale.events(ALICE)) == 1 and len(api.radicale.events(BOB)) == 1
    return seen


def _secrets(api: ApiHarness, n8n: N8nHandle, keyring: KeyRing, seen: dict[str, Any]) -> list[str]:
    seed = keyring._seeds["k1"]  # the fixture's ring: one key k1
    sig = seen["signature"]
    out = [
        *api.keys.values(),
        seen["approval"],
        seen["link"],
        *seen["cookies"],
        n8n.api_key,
        base64.b64encode(seed).decode(),
        seed.hex(),
        sig["signature"],
        base64.b64decode(sig["signature"]).hex(),
    ]
    assert all(len(s) >= 20 for s in out), "a secret too short to grep for"
    return out


def _attributes(spans: tuple[ReadableSpan, ...]) -> str:
    return json.dumps([dict(s.attributes or {}) for s in spans], default=str)


def test_a_meeting_logs_json_with_plan_ids_no_secret_and_one_trace(
    api: ApiHarness, n8n: N8nHandle, keyring: KeyRing
) -> None:
    link = UserStore(api.db, clock=lambda: datetime.now(UTC)).login_link(ALICE)
    buf, exporter = _Lines(), InMemorySpanExporter()
    with logs_to(buf), traces_to(exporter):
        seen = _meeting(api, link)
    seen["link"] = link
    text = buf.getvalue()
    lines = [json.loads(line) for line in text.splitlines()]  # every line parses
    assert all(isinstance(line, dict) and "timestamp" in line for line in lines)
    for secret in _secrets(api, n8n, keyring, seen):
        assert secret not in text, "a secret in the logs"
        assert secret not in _attributes(exporter.get_finished_spans()), "a secret in a span"

    plan_id = seen["plan_id"]
    mine = [x for x in lines if x.get("plan_id") == plan_id]
    events = {str(x["event"]) for x in mine}
    assert {"http.request", "n8n.call", "provider.request"} <= events, events
    assert any(e.startswith("audit.") for e in events)
    # a line about a plan's step or event names the plan
    about_plans = [x for x in lines if "step" in x or str(x["event"]).startswith("audit.step")]
    assert about_plans and all(x.get("plan_id") for x in about_plans)
    writes = [x for x in mine if x["event"] == "n8n.call" and x.get("write")]
    assert writes and all(isinstance(x["latency_ms"], float) and x["status"] for x in writes)

    spans = exporter.get_finished_spans()
    (execute,) = [s for s in spans if s.name == "POST /v1/plans/{plan_id}/execute"]
    trace_id = execute.context.trace_id
    in_trace = [s for s in spans if s.context.trace_id == trace_id]
    assert execute.parent is None
    n8n_calls = [s for s in in_trace if s.name == "n8n.call"]
    assert n8n_calls and all(s.parent is not None for s in n8n_calls)
    assert any((s.attributes or {}).get("countersign.write") for s in n8n_calls)
    # provider requests sent from the API process (the execute-time re-read of the calendar)
    # are spans of the request that made them
    requests = {s.context.trace_id for s in spans if s.name.startswith(("GET ", "POST "))}
    providers = [s for s in spans if s.name == "provider.request"]
    assert providers and all(s.context.trace_id in requests for s in providers)


def test_stats_reads_the_view_of_the_run(api: ApiHarness) -> None:
    with api.client() as c:
        plan_id = c.post("/v1/intents", json=meeting_body("Counted", day=4, hours=3)).json()[
            "plan_id"
        ]
        assert c.post(f"/v1/plans/{plan_id}/preview").status_code == 200
        r = c.post(f"/v1/plans/{plan_id}/execute", json={"tokens": {"gate-A": "cst_" + "x" * 43}})
        assert r.status_code == 403, r.text
        view = service_view(c.get("/metrics").text)
    assert view.preview_p95_ms is not None and view.previews >= 1
    assert view.refusals_by_reason.get(r.json()["code"], 0) >= 1
    assert view.errors_by_class.get("refused (4xx)", 0) >= 1
    assert view.watchers == 0
