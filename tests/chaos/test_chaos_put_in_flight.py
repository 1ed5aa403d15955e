"""Chaos, the exact case progress saving was kept for: n8n SIGKILLed while the meeting's first
calendar PUT is in flight, on a write workflow that saves no progress (the registry marks
``caldav.create_event`` probed; WorkflowBuilder SPEC "What n8n keeps").

A proxy in front of Radicale holds alice's PUT: ``dropped`` never forwards it (the event is not
at the provider), ``applied`` forwards it and holds the answer (the event is there, the answer
lost). n8n is killed while it waits, started again, and the reconciler's passes settle the plan:
n8n's record is found by the body n8n stored when it made the execution (its ``runData`` holds
only recovery placeholders) and says ``unknown``; the probe reads the event by UID — ``applied``:
written once, never re-sent; ``dropped``: absent, sent again once under the spent approval.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import threading
from collections import Counter
from dataclasses import dataclass, fields
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from countersign.kernel import Plan
from countersign.steps import N8nTransport
from countersign.workflowbuilder import build_workflow_for_step
from tests.chaos.harness import (
    ALICE,
    BOB,
    MeetingWorld,
    check_meeting,
    plan_status,
    settle_until_quiet,
)
from tests.chaos.test_chaos_meeting import world  # noqa: F401 - the meeting's world fixture

_FRAMING = frozenset({"transfer-encoding", "connection", "content-length", "content-encoding"})


class HoldingProxy:
    """Forwards every request to ``upstream``; the first PUT to ``held_user``'s calendar is
    held until its client goes away (``apply``: after forwarding it, else without)."""

    def __init__(self, upstream: str, held_user: str, *, apply: bool) -> None:
        self.upstream, self.held_user, self.apply = upstream.rstrip("/"), held_user, apply
        self.holding = threading.Event()
        #: PUTs that reached Radicale, by calendar owner (the held one counted when applied)
        self.puts: Counter[str] = Counter()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def _any(self) -> None:
                proxy.handle(self)

            do_GET = do_PUT = do_DELETE = do_REPORT = do_PROPFIND = _any  # noqa: N815
            do_MKCOL = do_MKCALENDAR = do_OPTIONS = do_HEAD = _any  # noqa: N815

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        body = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        hold = h.command == "PUT" and f"/{self.held_user}/" in h.path and not self.holding.is_set()
        if hold and not self.apply:
            self._hold(h.connection)
            return
        skip = ("host", "connection", "content-length", "accept-encoding")
        headers = {k: v for k, v in h.headers.items() if k.lower() not in skip}
        r = httpx.request(h.command, self.upstream + h.path, headers=headers, content=body)
        if h.command == "PUT":
            self.puts[h.path.split("/")[1]] += 1
        if hold:
            self._hold(h.connection)
            return
        # r.content is decoded and whole: its own length, no upstream framing or encoding
        kept = [(k, v) for k, v in r.headers.items() if k.lower() not in _FRAMING]
        h.send_response(r.status_code)
        for k, v in [*kept, ("Content-Length", str(len(r.content)))]:
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(r.content)

    def _hold(self, conn: socket.socket) -> None:
        """Answer nothing until the client closes the connection (n8n killed)."""
        self.holding.set()
        while select.select([conn], [], [], 60)[0]:
            if not conn.recv(4096):
                break
        conn.close()

    def __enter__(self) -> HoldingProxy:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class ProxiedMeeting(MeetingWorld):
    """The meeting's world with the calendar reached through the proxy (the writes and the
    probe alike)."""

    caldav_url: str = ""

    @property
    def settings(self) -> dict[str, str]:
        return {**super().settings, "caldav_base_url": self.caldav_url}


def _reasons(w: MeetingWorld, plan_id: str) -> list[str]:
    """Why the reconciler left step 5 unknown (its audit rows)."""
    with w.db.tx() as c:
        rows = c.execute(
            text(
                "SELECT reason FROM audit_log WHERE kind = 'reconcile_unsettled' "
                "AND plan_id = :p AND step = 5 ORDER BY seq"
            ),
            {"p": plan_id},
        ).scalars()
        return [str(r) for r in rows]


async def _killed_with_the_put_in_flight(w: ProxiedMeeting, proxy: HoldingProxy) -> dict[str, Any]:
    """Preview, approve, execute; n8n SIGKILLed while alice's PUT is held; n8n started again and
    the reconciler's passes run until the plan has an end. The signed plan."""
    doc = w.signed(7)
    plan = Plan.model_validate(doc["plan"])
    wf = build_workflow_for_step(plan, doc["plan_hash"], plan.step(5), w.registry)
    assert wf.workflow["settings"]["saveExecutionProgress"] is False  # the case under test
    async with w.n8n.client(timeout_s=30) as client:
        transport = N8nTransport(client)
        tokens = await w.preview_and_approve(doc, transport)
        run = asyncio.create_task(w.executor(transport).execute(doc, user_id=ALICE, tokens=tokens))
        assert await asyncio.to_thread(proxy.holding.wait, 30), "alice's PUT never came"
        await asyncio.to_thread(w.n8n.kill)
        with contextlib.suppress(Exception):  # cut short: raised or reported, either is fine
            await run
    await asyncio.to_thread(w.n8n.restart)
    async with w.n8n.client() as client:
        await settle_until_quiet(w, N8nTransport(client), plan.plan_id)
    return doc


@pytest.mark.parametrize("apply", [True, False], ids=["applied", "dropped"])
def test_a_put_in_flight_without_progress_is_settled_by_the_probe(
    world: MeetingWorld,  # noqa: F811 - the fixture imported above
    apply: bool,
) -> None:
    w = ProxiedMeeting(**{f.name: getattr(world, f.name) for f in fields(world)})
    with HoldingProxy(w.radicale.base_url, ALICE, apply=apply) as proxy:
        w.caldav_url = proxy.base_url
        doc = asyncio.run(_killed_with_the_put_in_flight(w, proxy))
        plan_id = doc["plan"]["plan_id"]
        status, gates = plan_status(w.db, plan_id)
        # n8n's record was found by the body it stored at creation (its runData held only
        # recovery placeholders) and read unknown — not "no readable trigger data", not failed
        reasons = _reasons(w, plan_id)
        assert reasons and reasons[0].startswith("n8n execution "), reasons
        assert "no readable trigger data" not in " ".join(reasons)
        assert status == "completed", (status, reasons)
        assert check_meeting(w, doc, status, gates) == []
        # applied: at Radicale once, never sent again; dropped: never arrived, sent again once
        assert proxy.puts == Counter({ALICE: 1, BOB: 1}), proxy.puts
