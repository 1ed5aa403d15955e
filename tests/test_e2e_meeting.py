"""The meeting flow end to end on real servers: n8n, Postgres, Radicale (CalDAV), aiosmtpd (SMTP).

Plan → sign → preview (parallel free/busy for two people → overlap) → gate-A → execute (create the
event, mail both) — and every way it must refuse: a tampered plan, a wrong / expired / reused
token, a calendar that changed since the preview, a second execute, n8n down mid-execute.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import icalendar
import pytest
from sqlalchemy import text

from countersign.approvals import (
    Approvals,
    TokenExpiredError,
    TokenGateMismatchError,
    TokenPlanMismatchError,
    TokenReusedError,
    TokenUserMismatchError,
)
from countersign.audit import AuditLog
from countersign.execute import ExecuteRefusedError, Executor, StaleWorldError
from countersign.kernel import Intent, Plan, Policy, Settings, SignatureError, system_clock
from countersign.n8n import N8nClient, N8nHandle, install, start, stop
from countersign.planner.testing import signed_plan
from countersign.preview import run_preview
from countersign.registry import Registry
from countersign.sandbox import Radicale, SmtpSink
from countersign.signer import KeyRing
from countersign.steps import N8nTransport, StoreRecorder
from countersign.storage import Database, IdempotencyLedger, OutcomeUnknownError
from countersign.workflowbuilder import CredentialRef


def _now_utc() -> str:
    from datetime import UTC as _UTC
    from datetime import datetime as _dt

    return _dt.now(_UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


LOCAL = Policy(providers={"calendar": "caldav", "mail": "smtp", "chat": "slack"})
ALICE, BOB = "alice@example.com", "bob@example.com"
_counter = iter(range(1, 10_000))


def _signed(registry: Registry, keyring: KeyRing, title: str = "Sync") -> dict[str, Any]:
    n = next(_counter)
    intent = Intent.model_validate(
        {
            "intent": "schedule_meeting",
            "intent_id": f"01JDQ3Z00000000000000{n:05d}",
            "received_at": _now_utc(),  # a plan is valid for its TTL from here
            "user_id": ALICE,
            "entities": {
                "participants": [ALICE, BOB],
                "duration_min": 30,
                "title": f"{title} {n}",
                "window_start": "2037-11-23T13:00:00Z",
                "window_end": "2037-11-23T18:00:00Z",
            },
        }
    )
    return signed_plan(intent, keyring, registry, LOCAL)


@dataclass
class Stack:
    n8n: N8nHandle
    db: Database
    registry: Registry
    keyring: KeyRing
    radicale: Radicale
    smtp: SmtpSink
    settings: dict[str, str]
    creds: dict[str, CredentialRef]

    def events(self) -> list[str]:
        return self.radicale.events(ALICE)

    def mails(self) -> int:
        return len(self.smtp.messages)


@pytest.fixture(scope="module")
def smtp_credential(n8n: N8nHandle, smtp_server: SmtpSink) -> CredentialRef:
    async def make() -> dict[str, Any]:
        async with N8nClient(n8n.base_url, n8n.api_key) as c:
            return await c.create_credential(
                "local smtp",
                "smtp",
                {
                    "host": smtp_server.host,
                    "port": smtp_server.port,
                    "secure": False,
                    "disableStartTls": True,
                    "user": "",
                    "password": "",
                },
            )

    out = asyncio.run(make())
    return CredentialRef(id=str(out["id"]), name="local smtp")


@pytest.fixture
def stack(
    n8n: N8nHandle,
    db: Database,
    registry: Registry,
    keyring: KeyRing,
    radicale: Radicale,
    smtp_server: SmtpSink,
    smtp_credential: CredentialRef,
) -> Iterator[Stack]:
    for user in (ALICE, BOB):
        radicale.make_calendar(user)
        for name in radicale.events(user):
            import httpx

            httpx.delete(radicale.calendar_url(user) + name, timeout=5)
    smtp_server.messages.clear()
    yield Stack(
        n8n,
        db,
        registry,
        keyring,
        radicale,
        smtp_server,
        {"caldav_base_url": radicale.base_url, "smtp_from": "countersign@example.com"},
        {"smtp": smtp_credential},
    )


async def _preview(s: Stack, doc: dict[str, Any], transport: N8nTransport) -> Any:
    return await run_preview(
        doc,
        keys=s.keyring,
        registry=s.registry,
        transport=transport,
        recorder=StoreRecorder(s.db, clock=system_clock),
        settings=s.settings,
        credentials=s.creds,
        actor=ALICE,
        now=system_clock(),
    )


def _executor(s: Stack, transport: N8nTransport, clock: Any = None) -> Executor:
    kw: dict[str, Any] = {"clock": clock} if clock else {}
    return Executor(
        keys=s.keyring,
        registry=s.registry,
        transport=transport,
        db=s.db,
        settings=s.settings,
        credentials=s.creds,
        **kw,
    )


def _approve(s: Stack, doc: dict[str, Any], slot: dict[str, Any], **kw: Any) -> str:
    args: dict[str, Any] = {
        "plan_id": doc["plan"]["plan_id"],
        "plan_hash": doc["plan_hash"],
        "gate_id": "gate-A",
        "user_id": ALICE,
        "scopes": ["calendar.write", "mail.send"],
        "ttl_s": 300,
    }
    args.update(kw)
    return Approvals(s.db, clock=kw.pop("clock", system_clock)).issue(**args, choice=slot).token


def _first_slot(preview: Any) -> dict[str, str]:
    slot = preview.wrapper.normalized["steps"]["3"]["slots"][0]
    start = datetime.fromisoformat(slot["start"].replace("Z", "+00:00"))
    return {
        "start": slot["start"],
        "end": (start + timedelta(minutes=30)).isoformat().replace("+00:00", "Z"),
    }


def test_meeting_preview_then_execute_exactly_once(stack: Stack) -> None:
    doc = _signed(stack.registry, stack.keyring)
    stack.radicale.add_event(BOB, "bob-busy", "20371123T130000Z", "20371123T140000Z")

    async def go() -> None:
        async with N8nClient(stack.n8n.base_url, stack.n8n.api_key) as client:
            transport = N8nTransport(client)
            preview = await _preview(stack, doc, transport)
            steps = preview.wrapper.normalized["steps"]
            assert set(steps) == {"1", "2", "3"}
            assert steps["2"]["busy"] == [
                ["2037-11-23T14:00:00Z".replace("14", "13"), "2037-11-23T14:00:00Z"]
            ]
            assert steps["3"]["slots"][0]["start"] == "2037-11-23T14:00:00.000Z"
            assert preview.wrapper.can_execute
            assert stack.events() == [] and stack.mails() == 0  # preview never writes
            token = _approve(stack, doc, _first_slot(preview))
            report = await _executor(stack, transport).execute(
                doc, user_id=ALICE, tokens={"gate-A": token}
            )
            assert report.status == "completed"
            assert [(w.step, w.status) for w in report.wrappers] == [
                (5, "created"),  # the event in Alice's calendar
                (6, "created"),  # … and in Bob's
                (7, "created"),
                (8, "created"),
            ]
            assert len(stack.events()) == 1 and stack.mails() == 2
            # a second execute (fresh approval) writes nothing new
            token2 = _approve(stack, doc, _first_slot(preview))
            again = await _executor(stack, transport).execute(
                doc, user_id=ALICE, tokens={"gate-A": token2}
            )
            assert [w.status for w in again.wrappers] == ["skipped"] * 4
            assert len(stack.events()) == 1 and stack.mails() == 2
            # without a token: refused
            with pytest.raises(ExecuteRefusedError):
                await _executor(stack, transport).execute(doc, user_id=ALICE, tokens={})

    asyncio.run(go())
    with stack.db.tx() as c:
        assert AuditLog(clock=system_clock).verify(c).ok
        kinds = [r.kind for r in c.execute(text("SELECT kind FROM audit_log ORDER BY seq"))]
    assert {
        "plan_signed",
        "preview_run",
        "token_issued",
        "gate_approved",
        "step_started",
        "step_finished",
        "execute_refused",
    } <= set(kinds)


def _stored_event(s: Stack, user: str) -> icalendar.Event:
    """The one VEVENT Radicale keeps in ``user``'s calendar, parsed by ``icalendar`` from what a
    calendar client would GET."""
    import httpx

    (name,) = s.radicale.events(user)
    r = httpx.get(s.radicale.calendar_url(user) + name, timeout=5)
    assert r.status_code == 200, r.status_code
    (event,) = icalendar.Calendar.from_ical(r.text).walk("VEVENT")
    assert isinstance(event, icalendar.Event)
    return event


def test_meeting_events_are_one_meeting_in_every_calendar(stack: Stack) -> None:
    """What lands in each attendee's calendar is what RFC 5545 and a client expect of one meeting
    (issue 25): the same UID in Alice's and Bob's calendars, ORGANIZER = the person asking,
    both people as ATTENDEE, DTSTAMP = when it was written (not the start), and the time and
    title the card offered; the two writes keep their own idempotency keys."""
    doc = _signed(stack.registry, stack.keyring, title="Planning")

    async def go() -> dict[str, str]:
        async with N8nClient(stack.n8n.base_url, stack.n8n.api_key) as client:
            transport = N8nTransport(client)
            slot = _first_slot(await _preview(stack, doc, transport))
            report = await _executor(stack, transport).execute(
                doc, user_id=ALICE, tokens={"gate-A": _approve(stack, doc, slot)}
            )
            assert report.status == "completed"
            return slot

    before = datetime.now(UTC).replace(microsecond=0)
    slot = asyncio.run(go())
    after = datetime.now(UTC)
    events = {who: _stored_event(stack, who) for who in (ALICE, BOB)}
    (uid,) = {e.uid for e in events.values()}
    assert uid == f"{doc['plan']['plan_id'].lower()}-5"
    title = doc["plan"]["intent"]["entities"]["title"]
    for event in events.values():
        assert event.summary == title
        assert str(event.organizer) == f"mailto:{ALICE}"
        assert sorted(str(a) for a in event.attendees) == [f"mailto:{ALICE}", f"mailto:{BOB}"]
        assert event.start == datetime.fromisoformat(slot["start"].replace("Z", "+00:00"))
        assert event.end == datetime.fromisoformat(slot["end"].replace("Z", "+00:00"))
        stamp = event.DTSTAMP  # when it was written, not the start
        assert stamp != event.start
        assert before <= stamp <= after
    # the invitations n8n sent (nodemailer) carry the headers a mail client expects
    assert sorted(str(m["To"]) for m in stack.smtp.messages) == [ALICE, BOB]
    for m in stack.smtp.messages:
        assert before <= parsedate_to_datetime(str(m["Date"])) <= after + timedelta(seconds=1)
        assert str(m["Message-ID"]).startswith("<")
    with stack.db.tx() as c:
        rows = c.execute(
            text("SELECT key, state FROM idempotency_keys WHERE key LIKE :p ORDER BY key"),
            {"p": f"{doc['plan']['plan_id']}:%"},
        ).all()
    # two events, two mails: each write its own key (plan_id:step:arg_hash), each completed once
    assert [r.key.split(":")[1] for r in rows] == ["5", "6", "7", "8"], rows
    assert {r.state for r in rows} == {"completed"}


def _with_invitations(doc: dict[str, Any], keyring: KeyRing) -> dict[str, Any]:
    """The plan re-signed with each mail step given ``event`` = the meeting its create steps
    write (their ``uid``, ``title``, ``start``/``end`` references to gate-A's choice,
    ``organizer``, ``attendees``): the wiring the meeting intent makes once the Planner can name
    another template's ``$step.uid`` (H5's report, issue 25)."""
    plan = Plan.model_validate(doc["plan"])
    create = next(s for s in plan.graph if s.call == "create_event")
    event = {k: create.args[k] for k in ("uid", "title", "start", "end", "organizer", "attendees")}
    graph = [
        s.model_copy(update={"args": {**s.args, "event": event}}) if s.call == "send" else s
        for s in plan.graph
    ]
    return signed_plan(Plan.model_validate({**plan.model_dump(), "graph": graph}), keyring)


def _invitation(m: EmailMessage) -> tuple[str, icalendar.Calendar]:
    """A received invitation's text and its attached calendar, read with the standard ``email``
    package (the sink parses with ``policy.default``) and ``icalendar``."""
    assert m.get_content_type() == "multipart/mixed", m.get_content_type()
    body = m.get_body(("plain",))
    assert body is not None
    (part,) = list(m.iter_attachments())
    assert part.get_content_type() == "text/calendar" and part.get_filename() == "invite.ics"
    content = part.get_content()
    text = content if isinstance(content, str) else bytes(content).decode()
    return "\n".join(body.get_content().splitlines()), icalendar.Calendar.from_ical(text)


def test_meeting_invitations_carry_the_event_the_calendars_hold(stack: Stack) -> None:
    """On n8n (Send Email, the .ics made binary by the builder's Files node): each participant's
    mail is the card's text with ``invite.ics`` attached, a ``METHOD:REQUEST`` calendar whose one
    VEVENT is the meeting Radicale stores — the same UID, ORGANIZER, ATTENDEEs, the approved
    slot, the title — stamped when it was sent (issue 25)."""
    doc = _with_invitations(_signed(stack.registry, stack.keyring, title="Review"), stack.keyring)

    async def go() -> dict[str, str]:
        async with N8nClient(stack.n8n.base_url, stack.n8n.api_key) as client:
            transport = N8nTransport(client)
            slot = _first_slot(await _preview(stack, doc, transport))
            report = await _executor(stack, transport).execute(
                doc, user_id=ALICE, tokens={"gate-A": _approve(stack, doc, slot)}
            )
            assert report.status == "completed", report
            return slot

    before = datetime.now(UTC).replace(microsecond=0)
    slot = asyncio.run(go())
    after = datetime.now(UTC)
    stored = {who: _stored_event(stack, who) for who in (ALICE, BOB)}
    (uid,) = {e.uid for e in stored.values()}
    notify = [s for s in doc["plan"]["graph"] if s["call"] == "send"]
    assert sorted(str(m["To"]) for m in stack.smtp.messages) == [ALICE, BOB]
    for m in stack.smtp.messages:
        assert isinstance(m, EmailMessage)
        promised = next(s["args"] for s in notify if s["args"]["to"] == str(m["To"]))
        assert str(m["Subject"]) == promised["subject"]
        text, cal = _invitation(m)
        assert text == promised["body"]
        assert str(cal["METHOD"]) == "REQUEST"
        (event,) = cal.walk("VEVENT")
        assert isinstance(event, icalendar.Event)
        kept = stored[str(m["To"])]
        assert event.uid == uid
        assert event.summary == kept.summary == promised["event"]["title"]
        assert str(event.organizer) == str(kept.organizer) == f"mailto:{ALICE}"
        people = sorted(str(a) for a in event.attendees)
        assert (
            people == sorted(str(a) for a in kept.attendees) == [f"mailto:{ALICE}", f"mailto:{BOB}"]
        )
        start = datetime.fromisoformat(slot["start"].replace("Z", "+00:00"))
        end = datetime.fromisoformat(slot["end"].replace("Z", "+00:00"))
        assert event.start == kept.start == start and event.end == kept.end == end
        assert before <= event.DTSTAMP <= after


def test_tampered_plan_never_reaches_n8n(stack: Stack) -> None:
    doc = _signed(stack.registry, stack.keyring)
    doc["plan"]["graph"][4]["args"]["title"] = "something else"

    async def go() -> None:
        async with N8nClient(stack.n8n.base_url, stack.n8n.api_key) as client:
            before = len(await client.list_executions(limit=250))
            transport = N8nTransport(client)
            with pytest.raises(SignatureError):
                await _preview(stack, doc, transport)
            with pytest.raises(SignatureError):
                await _executor(stack, transport).execute(
                    doc, user_id=ALICE, tokens={"gate-A": "cst_" + "x" * 43}
                )
            assert transport.calls == 0
            assert len(await client.list_executions(limit=250)) == before

    asyncio.run(go())
    assert stack.events() == [] and stack.mails() == 0
    with stack.db.tx() as c:
        assert (
            c.execute(
                text("SELECT count(*) FROM audit_log WHERE kind = 'signature_refused'")
            ).scalar()
            == 2
        )


def test_wrong_expired_reused_tokens_write_nothing(stack: Stack) -> None:
    doc = _signed(stack.registry, stack.keyring)
    other = _signed(stack.registry, stack.keyring)

    class Clock:
        now = datetime.now(UTC)

        def __call__(self) -> datetime:
            return self.now

    clock = Clock()

    async def go() -> None:
        async with N8nClient(stack.n8n.base_url, stack.n8n.api_key) as client:
            transport = N8nTransport(client)
            preview = await _preview(stack, doc, transport)
            slot = _first_slot(preview)
            cases: list[tuple[str, type[Exception]]] = [
                (_approve(stack, other, slot), TokenPlanMismatchError),
                (_approve(stack, doc, slot, gate_id="gate-B"), TokenGateMismatchError),
                (_approve(stack, doc, slot, user_id=BOB), TokenUserMismatchError),
            ]
            for token, error in cases:
                with pytest.raises(error):
                    await _executor(stack, transport).execute(
                        doc, user_id=ALICE, tokens={"gate-A": token}
                    )
            expiring = (
                Approvals(stack.db, clock=clock)
                .issue(
                    plan_id=doc["plan"]["plan_id"],
                    plan_hash=doc["plan_hash"],
                    gate_id="gate-A",
                    user_id=ALICE,
                    scopes=["calendar.write", "mail.send"],
                    ttl_s=60,
                    choice=slot,
                )
                .token
            )
            clock.now += timedelta(seconds=61)
            with pytest.raises(TokenExpiredError):
                await _executor(stack, transport, clock=clock).execute(
                    doc, user_id=ALICE, tokens={"gate-A": expiring}
                )
            used = _approve(stack, doc, slot)
            Approvals(stack.db, clock=system_clock).redeem(
                used,
                plan_id=doc["plan"]["plan_id"],
                plan_hash=doc["plan_hash"],
                gate_id="gate-A",
                user_id=ALICE,
            )
            with pytest.raises(TokenReusedError):
                await _executor(stack, transport).execute(
                    doc, user_id=ALICE, tokens={"gate-A": used}
                )

    asyncio.run(go())
    assert stack.events() == [] and stack.mails() == 0


def test_calendar_change_between_preview_and_execute_stops_the_write(stack: Stack) -> None:
    doc = _signed(stack.registry, stack.keyring)

    async def go() -> None:
        async with N8nClient(stack.n8n.base_url, stack.n8n.api_key) as client:
            transport = N8nTransport(client)
            preview = await _preview(stack, doc, transport)
            token = _approve(stack, doc, _first_slot(preview))
            stack.radicale.add_event(BOB, "late-busy", "20371123T150000Z", "20371123T160000Z")
            with pytest.raises(StaleWorldError) as info:
                await _executor(stack, transport).execute(
                    doc, user_id=ALICE, tokens={"gate-A": token}
                )
            assert [c.step for c in info.value.changes] == [
                2,
                3,
            ]  # bob's busy time, and so the overlap
            assert "at preview" in info.value.message

    asyncio.run(go())
    assert stack.events() == [] and stack.mails() == 0


def test_n8n_down_mid_execute_then_again_exactly_one_event(stack: Stack, tmp_path: Path) -> None:
    """A dedicated n8n is stopped between preview and execute; the write cannot be sent (known
    no effect); after a restart on the same data folder, a new approval executes exactly once."""
    cache = Path(os.environ.get("COUNTERSIGN_CACHE_DIR") or Settings().cache_dir)
    inst = install(cache)
    data = tmp_path / "n8n"
    handle = start(inst, data)
    doc = _signed(stack.registry, stack.keyring)

    async def cred(h: N8nHandle) -> CredentialRef:
        async with N8nClient(h.base_url, h.api_key) as c:
            out = await c.create_credential(
                "smtp",
                "smtp",
                {
                    "host": stack.smtp.host,
                    "port": stack.smtp.port,
                    "secure": False,
                    "disableStartTls": True,
                    "user": "",
                    "password": "",
                },
            )
        return CredentialRef(id=str(out["id"]), name="smtp")

    try:
        stack.creds = {"smtp": asyncio.run(cred(handle))}

        class KillBeforeWrite(N8nTransport):
            """Stops n8n the moment the first write (step 5) is about to be called."""

            async def call(self, path: str, body: Any, *, write: bool = False) -> Any:
                if body["plan"]["step"] == 5 and (data / "n8n.pid").exists():
                    stop(data)
                return await super().call(path, body, write=write)

        async def first() -> dict[str, str]:
            async with N8nClient(handle.base_url, handle.api_key) as client:
                transport = KillBeforeWrite(client)
                preview = await _preview(stack, doc, transport)
                slot = _first_slot(preview)
                token = _approve(stack, doc, slot)
                try:
                    report = await _executor(stack, transport).execute(
                        doc, user_id=ALICE, tokens={"gate-A": token}
                    )
                except OutcomeUnknownError:
                    pass  # the request went onto a pooled connection n8n had just closed: ambiguous
                else:
                    assert report.status == "failed"
                    # the two calendar writes (Alice's, Bob's) run concurrently: both fail
                    assert {w.step for w in report.wrappers} <= {5, 6}
                    assert {w.status for w in report.wrappers} == {"error"}
                return slot

        slot = asyncio.run(first())
        assert stack.events() == []
        # An ambiguous outcome is never retried blindly: reconcile it with a lookup at the provider
        # (no event in the calendar: the write did not happen), as an operator or connector would.
        with stack.db.tx() as c:
            rows = c.execute(
                text("SELECT key, state FROM idempotency_keys WHERE key LIKE :k"),
                {"k": doc["plan"]["plan_id"] + ":%"},
            ).all()
        assert rows and {r.state for r in rows} <= {"failed", "unknown"}
        for row in rows:
            if row.state == "unknown":
                IdempotencyLedger(
                    stack.db, clock=system_clock, audit=AuditLog(clock=system_clock)
                ).reconcile(row.key, outcome="failed", actor="caldav lookup: no event")
        handle = start(inst, data)

        async def second() -> None:
            async with N8nClient(handle.base_url, handle.api_key) as client:
                transport = N8nTransport(client)
                token = _approve(stack, doc, slot)
                report = await _executor(stack, transport).execute(
                    doc, user_id=ALICE, tokens={"gate-A": token}
                )
                assert report.status == "completed"
                token = _approve(stack, doc, slot)
                again = await _executor(stack, transport).execute(
                    doc, user_id=ALICE, tokens={"gate-A": token}
                )
                assert {w.status for w in again.wrappers} == {"skipped"}

        asyncio.run(second())
        assert len(stack.events()) == 1 and stack.mails() == 2
    finally:
        stop(data)


# ---- a write is sent at most once, whatever happens after it left (issue 10, hole 2) ------------


class _RecordingProxy:
    """Forwards every request to Radicale and records it; a PUT can be answered slowly (after the
    client gave up) or with a 500 (after Radicale stored it): the provider acted either way."""

    def __init__(self, target: str, mode: str) -> None:
        import http.server
        import threading

        import httpx

        self.arrivals: list[tuple[str, str]] = []
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                proxy.arrivals.append((self.command, self.path))
                r = httpx.request(
                    self.command,
                    target + self.path,
                    content=body,
                    headers={k: v for k, v in self.headers.items() if k.lower() not in {"host"}},
                    timeout=10,
                )
                status = r.status_code
                if self.command == "PUT":
                    if mode == "slow":
                        import time as _t

                        _t.sleep(4)
                    elif mode == "error":
                        status = 500
                self.send_response(status)
                for k, v in r.headers.items():
                    # r.content is decoded: never pass on the upstream Content-Encoding
                    if k.lower() not in {
                        "content-length",
                        "transfer-encoding",
                        "connection",
                        "content-encoding",
                    }:
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(r.content)))
                self.end_headers()
                self.wfile.write(r.content)

            do_GET = do_PUT = do_POST = do_DELETE = do_REPORT = do_PROPFIND = _forward  # noqa: N815

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def writes(self) -> list[tuple[str, str]]:
        return [a for a in self.arrivals if a[0] not in {"GET", "REPORT", "PROPFIND"}]

    def close(self) -> None:
        self.server.shutdown()


def _key_state(s: Stack, doc: dict[str, Any], step: int) -> str:
    with s.db.tx() as c:
        return str(
            c.execute(
                text("SELECT state FROM idempotency_keys WHERE key LIKE :k"),
                {"k": f"{doc['plan']['plan_id']}:{step}:%"},
            ).scalar_one()
        )


@pytest.mark.parametrize("mode", ["slow", "error"])
def test_write_that_timed_out_or_got_5xx_arrives_once_and_is_unknown(
    stack: Stack, mode: str
) -> None:
    """The calendar writes (Alice's and Bob's, concurrent) reach the provider, then the answers
    are lost (the webhook calls time out) or are 500s: exactly one PUT per calendar arrives, the
    keys are ``unknown``, and a new approval sends nothing more under them."""
    proxy = _RecordingProxy(stack.radicale.base_url, mode)
    stack.settings = {**stack.settings, "caldav_base_url": proxy.url}
    doc = _signed(stack.registry, stack.keyring)
    try:

        async def go() -> None:
            async with N8nClient(stack.n8n.base_url, stack.n8n.api_key, timeout_s=2.0) as client:
                transport = N8nTransport(client)
                preview = await _preview(stack, doc, transport)
                slot = _first_slot(preview)
                with pytest.raises(OutcomeUnknownError):
                    await _executor(stack, transport).execute(
                        doc, user_id=ALICE, tokens={"gate-A": _approve(stack, doc, slot)}
                    )
                await asyncio.sleep(5 if mode == "slow" else 0.5)  # n8n finishes on its own
                with pytest.raises(OutcomeUnknownError):
                    await _executor(stack, transport).execute(
                        doc, user_id=ALICE, tokens={"gate-A": _approve(stack, doc, slot)}
                    )
                assert [m for m, _ in proxy.writes()] == ["PUT", "PUT"]
                # n8n's execution record says what happened: the late 201 settles the key as
                # completed (the next execute answers it from the ledger); a provider 500 proves
                # nothing, so the key stays unknown for a person
                settled = await _executor(stack, transport).reconcile(
                    doc, user_id=ALICE, settle_after_s=0
                )
                state = "completed" if mode == "slow" else "unknown"
                assert settled == {5: state, 6: state}
                if mode == "slow":
                    report = await _executor(stack, transport).execute(
                        doc, user_id=ALICE, tokens={"gate-A": _approve(stack, doc, slot)}
                    )
                    assert [(w.step, w.status) for w in report.wrappers] == [
                        (5, "skipped"),
                        (6, "skipped"),
                        (7, "created"),
                        (8, "created"),
                    ]

        asyncio.run(go())
        assert [m for m, _ in proxy.writes()] == ["PUT", "PUT"]
        for step in (5, 6):
            assert _key_state(stack, doc, step) == ("completed" if mode == "slow" else "unknown")
        assert len(stack.events()) == 1 and stack.mails() == (2 if mode == "slow" else 0)
    finally:
        proxy.close()


def test_mail_whose_n8n_answers_500_is_sent_once(
    stack: Stack, n8n: N8nHandle, tmp_path: Path
) -> None:
    """The SMTP server keeps the message, then answers 451: n8n's execution fails (500). The old
    client re-sent it 8 times; now one mail arrives and its key is ``unknown``."""
    from aiosmtpd.controller import Controller

    from countersign.n8n import free_port

    class KeepThenFail(SmtpSink):
        async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
            await super().handle_DATA(server, session, envelope)
            return "451 4.3.0 kept it, but say otherwise"

    flaky = KeepThenFail(host="127.0.0.1", port=free_port())
    controller = Controller(flaky, hostname="127.0.0.1", port=flaky.port)
    controller.start()
    doc = _signed(stack.registry, stack.keyring)
    try:

        async def go() -> None:
            async with N8nClient(n8n.base_url, n8n.api_key) as client:
                cred = await client.create_credential(
                    "flaky smtp",
                    "smtp",
                    {
                        "host": flaky.host,
                        "port": flaky.port,
                        "secure": False,
                        "disableStartTls": True,
                        "user": "",
                        "password": "",
                    },
                )
                stack.creds = {"smtp": CredentialRef(id=str(cred["id"]), name="flaky smtp")}
                transport = N8nTransport(client)
                preview = await _preview(stack, doc, transport)
                with pytest.raises(OutcomeUnknownError):
                    await _executor(stack, transport).execute(
                        doc,
                        user_id=ALICE,
                        tokens={"gate-A": _approve(stack, doc, _first_slot(preview))},
                    )

        asyncio.run(go())
        time_limit = datetime.now(UTC) + timedelta(seconds=5)
        while datetime.now(UTC) < time_limit and len(flaky.messages) < 2:
            import time as _t

            _t.sleep(0.2)
        # steps 6 and 7 mail Alice and Bob in parallel: each message arrives once, never more
        assert sorted(str(m["To"]) for m in flaky.messages) == sorted([ALICE, BOB])
        assert {_key_state(stack, doc, 7), _key_state(stack, doc, 8)} == {"unknown"}
        assert len(stack.events()) == 1  # the calendar write before them completed
    finally:
        controller.stop()


# ---- the ground moving under a signed plan (issue 10, hole 4) -----------------------------------


def test_registry_edited_after_signing_is_refused_before_anything_runs(
    stack: Stack, tmp_path: Path
) -> None:
    """The caldav connector's URL is pointed elsewhere after the plan was signed: preview and
    execute refuse it (audited), nothing reaches n8n, nothing is written."""
    import shutil

    from countersign.kernel import source_registry_dir
    from countersign.registry import load_registry
    from countersign.steps import PlanExpiredError, RegistryChangedError

    doc = _signed(stack.registry, stack.keyring)
    folder = tmp_path / "registry"
    shutil.copytree(source_registry_dir(), folder)
    caldav = folder / "connectors" / "caldav.yaml"
    caldav.write_text(
        caldav.read_text().replace("{@caldav_base_url}", "http://127.0.0.1:9/{@caldav_base_url}")
    )
    edited = load_registry(folder)
    assert edited.version != stack.registry.version

    async def go() -> None:
        async with N8nClient(stack.n8n.base_url, stack.n8n.api_key) as client:
            transport = N8nTransport(client)
            moved = Stack(**{**stack.__dict__, "registry": edited})
            with pytest.raises(RegistryChangedError, match="plan again"):
                await _preview(moved, doc, transport)
            preview = await _preview(stack, doc, transport)  # the signed registry: fine
            calls = transport.calls
            token = _approve(stack, doc, _first_slot(preview))
            with pytest.raises(RegistryChangedError):
                await _executor(moved, transport).execute(
                    doc, user_id=ALICE, tokens={"gate-A": token}
                )
            assert transport.calls == calls
            later = datetime.now(UTC) + timedelta(days=1)
            with pytest.raises(PlanExpiredError):
                await _executor(stack, transport, clock=lambda: later).execute(
                    doc, user_id=ALICE, tokens={"gate-A": token}
                )
            assert transport.calls == calls

    asyncio.run(go())
    assert stack.events() == [] and stack.mails() == 0
    with stack.db.tx() as c:
        reasons = c.execute(
            text("SELECT reason FROM audit_log WHERE kind = 'plan_refused' AND plan_id = :p"),
            {"p": doc["plan"]["plan_id"]},
        ).scalars()
        assert sorted(reasons) == ["plan_expired", "registry_changed", "registry_changed"]
