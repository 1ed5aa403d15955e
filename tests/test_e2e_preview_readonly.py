"""Preview never writes, counted at the wire (issue 10, hole 1; invariant §3.2) on real n8n.

Every read step of the plans below targets one recording HTTP server (CalDAV, shop and visa base
URLs all point at it); it records method, path and body of every request. Honest plans preview
through real n8n and the server sees only GETs. Then each read binding is hand-edited to write in
a temporary copy of the registry (``countersign.preview.testing.WRITE_EDITS``: the method in the
parameter an older HTTP Request version reads, a lower-case POST, a body on a GET, an unknown
typeVersion, a method-override header, WebDAV, pagination, a mail node, the op re-labelled as a
write); plans are made and signed against that copy, so only the read-only rule can stop them.
Every such preview is refused before anything runs, naming the step, and the server sees nothing.
A control shows the first edit really writes on this n8n when the check is bypassed.
"""

from __future__ import annotations

import asyncio
import http.server
import threading
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from countersign.kernel import Plan, Policy, source_registry_dir, system_clock
from countersign.n8n import N8nClient, N8nHandle
from countersign.planner.testing import make_intent, signed_plan
from countersign.preview import run_preview
from countersign.preview.testing import WRITE_EDITS, edited_registry
from countersign.registry import Registry, load_registry
from countersign.signer import KeyRing, plan_hash
from countersign.steps import (
    N8nStepRunner,
    N8nTransport,
    PreviewRefusedError,
    StoreRecorder,
    run_dag,
)
from countersign.storage import Database
from countersign.workflowbuilder import build_batch_workflow

LOCAL = Policy(providers={"calendar": "caldav", "mail": "smtp", "chat": "slack"})
INTENTS = ["find_meeting_time", "schedule_meeting", "purchase_item", "watch_visa_slots"]
#: (intent, the read op whose binding is edited)
TARGETS = [
    ("purchase_item", "shop.sandbox", "search"),
    ("find_meeting_time", "caldav", "list_free_busy"),
    ("watch_visa_slots", "visa.sandbox", "find_slots"),
]
EMPTY_ICS = b"BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//rec//EN\r\nEND:VCALENDAR\r\n"
EMPTY_MULTISTATUS = b'<?xml version="1.0"?><multistatus xmlns="DAV:"/>'


def _is_window_query(method: str, body: bytes) -> bool:
    """A calendar read as issue 28 sends it: a REPORT whose body is a calendar-query."""
    return method == "REPORT" and b"<C:calendar-query " in body and b"<C:time-range " in body


_ids = iter(range(1, 100_000))


class RecordingServer:
    """Answers every method; records (method, path, body) of each request it receives."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, bytes]] = []
        rec = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _any(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                rec.seen.append((self.command, self.path, body))
                status = 200
                if "/calendar/" in self.path and self.command == "REPORT":
                    out, kind, status = EMPTY_MULTISTATUS, "text/xml; charset=utf-8", 207
                elif "/calendar/" in self.path:
                    out, kind = EMPTY_ICS, "text/calendar"
                elif self.path.startswith("/search"):
                    out = b'{"offers": [{"item": "cable", "price": "9.90"}]}'
                    kind = "application/json"
                else:
                    out, kind = b'{"slots": []}', "application/json"
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(out)

            do_GET = do_HEAD = do_OPTIONS = do_POST = do_PUT = do_PATCH = do_DELETE = _any  # noqa: N815
            do_MKCOL = do_MOVE = do_COPY = do_PROPFIND = do_REPORT = _any  # noqa: N815

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def writes(self) -> list[tuple[str, str, bytes]]:
        return [r for r in self.seen if r[0] != "GET" and not _is_window_query(r[0], r[2])]


@pytest.fixture(scope="module")
def server() -> Iterator[RecordingServer]:
    s = RecordingServer()
    yield s
    s.server.shutdown()
    s.server.server_close()


def _signed(registry: Registry, keyring: KeyRing, intent: str) -> dict[str, Any]:
    now = datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    i = make_intent(intent, intent_id=f"01JDQ3Z00000000000000{next(_ids):05d}", received_at=now)
    if "window_start" in i.entities:  # a window still to come (one in the past is not planned)
        later = {"window_start": "2037-11-23T13:00:00Z", "window_end": "2037-11-23T18:00:00Z"}
        i = i.model_copy(update={"entities": {**i.entities, **later}})
    return signed_plan(i, keyring, registry, LOCAL)


async def _preview(
    n8n: N8nHandle,
    db: Database,
    keyring: KeyRing,
    registry: Registry,
    settings: dict[str, str],
    doc: dict[str, Any],
) -> Any:
    async with N8nClient(n8n.base_url, n8n.api_key) as client:
        return await run_preview(
            doc,
            keys=keyring,
            registry=registry,
            transport=N8nTransport(client),
            recorder=StoreRecorder(db, clock=system_clock),
            settings=settings,
            actor="u-alice",
            now=system_clock(),
        )


def _settings(server: RecordingServer) -> dict[str, str]:
    return {
        "caldav_base_url": server.url,
        "shop_base_url": server.url,
        "visa_base_url": server.url,
        "smtp_from": "countersign@example.com",
    }


def test_honest_previews_send_only_gets_and_window_queries(
    n8n: N8nHandle, db: Database, keyring: KeyRing, server: RecordingServer
) -> None:
    registry = load_registry(source_registry_dir())
    server.seen.clear()
    for intent in INTENTS:
        doc = _signed(registry, keyring, intent)
        before = len(server.seen)
        result = asyncio.run(_preview(n8n, db, keyring, registry, _settings(server), doc))
        assert result.wrapper.can_execute, (intent, result.wrapper.normalized)
        assert len(server.seen) > before, f"{intent}: its reads never reached the server"
    assert server.seen and server.writes() == []
    assert all(body == b"" for m, _, body in server.seen if m == "GET")
    assert any(m == "REPORT" for m, _, _ in server.seen)  # the calendar reads ask for the window


def test_same_op_reads_are_one_n8n_execution_with_the_outputs_of_one_per_step(
    n8n: N8nHandle, db: Database, keyring: KeyRing, server: RecordingServer
) -> None:
    """The meeting plan's two free/busy reads are ready together: the preview sends them as one
    execution of the op's batch workflow (issue 16.1), which sends both GETs and answers what one
    execution per step answers."""
    registry = load_registry(source_registry_dir())
    doc = _signed(registry, keyring, "find_meeting_time")
    plan = Plan.model_validate(doc["plan"])
    batch_name = build_batch_workflow(plan.step(1), registry).workflow["name"]

    batches: list[str] = []

    class Counting(N8nTransport):
        """Counts the batch workflow's calls (read workflows keep no n8n execution record)."""

        async def call_batch(self, path: str, body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
            batches.append(path)
            return await super().call_batch(path, body)

    async def go() -> tuple[int, int, dict[int, Any]]:
        async with N8nClient(n8n.base_url, n8n.api_key) as client:
            transport = Counting(client)
            before = len(batches)
            server.seen.clear()
            result = await run_preview(
                doc,
                keys=keyring,
                registry=registry,
                transport=transport,
                recorder=StoreRecorder(db, clock=system_clock),
                settings=_settings(server),
                actor="u-alice",
                now=system_clock(),
            )
            asked = sorted(p for m, p, b in server.seen if _is_window_query(m, b))
            assert asked == ["/alice@example.com/calendar/", "/bob@example.com/calendar/"]
            after = len(batches)
            assert await transport.executions_of(batch_name) == [], "a read keeps no record"
            one_each = N8nStepRunner(
                plan=plan,
                plan_hash=doc["plan_hash"],
                registry=registry,
                transport=transport,
                settings=_settings(server),
                read_only=True,
            )
            ref = await run_dag(plan, [1, 2, 3], one_each.run)
            assert ref == result.outputs
            return before, after, result.outputs

    before, after, outputs = asyncio.run(go())
    assert after == before + 1
    assert set(outputs) == {1, 2, 3} and outputs[1]["status"] == 207


@pytest.mark.parametrize("edit", sorted(WRITE_EDITS))
def test_hand_edited_write_bindings_are_refused_with_zero_requests(
    n8n: N8nHandle,
    db: Database,
    keyring: KeyRing,
    server: RecordingServer,
    tmp_path: Path,
    edit: str,
) -> None:
    for n, (intent, uses, call) in enumerate(TARGETS):
        registry = edited_registry(
            source_registry_dir(), tmp_path / f"registry-{n}", uses, call, WRITE_EDITS[edit]
        )
        doc = _signed(registry, keyring, intent)
        step = next(
            s["step"] for s in doc["plan"]["graph"] if (s["uses"], s["call"]) == (uses, call)
        )
        server.seen.clear()
        with pytest.raises(PreviewRefusedError) as info:
            asyncio.run(_preview(n8n, db, keyring, registry, _settings(server), doc))
        assert f"step {step} ({uses}.{call})" in info.value.message, info.value.message
        assert server.seen == [], f"{edit} on {uses}.{call}: {server.seen}"
        with db.tx() as c:
            kinds = [
                r.kind
                for r in c.execute(
                    text("SELECT kind FROM audit_log WHERE plan_id = :p"),
                    {"p": doc["plan"]["plan_id"]},
                )
            ]
        assert "preview_refused" in kinds and "preview_run" not in kinds


def test_control_the_v2_edit_really_writes_when_the_check_is_bypassed(
    n8n: N8nHandle, keyring: KeyRing, server: RecordingServer, tmp_path: Path
) -> None:
    """Without the check the same edited binding POSTs on this n8n: the zeros above are earned."""
    registry = edited_registry(
        source_registry_dir(),
        tmp_path / "registry",
        "shop.sandbox",
        "search",
        WRITE_EDITS["v2 requestMethod POST"],
    )
    doc = _signed(registry, keyring, "purchase_item")
    plan = Plan.model_validate(doc["plan"])
    server.seen.clear()

    async def go() -> None:
        async with N8nClient(n8n.base_url, n8n.api_key) as client:
            runner = N8nStepRunner(
                plan=plan,
                plan_hash=plan_hash(plan),
                registry=registry,
                transport=N8nTransport(client),
                settings=_settings(server),
                read_only=False,  # what main's preview effectively did
            )
            await runner.run(plan.step(1), {})

    asyncio.run(go())
    assert [m for m, _, _ in server.seen] == ["POST"]
