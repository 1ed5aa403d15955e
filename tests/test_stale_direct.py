"""The execute-time staleness re-check reads directly (issue 16.0) and still sees what n8n sees.

Real n8n, Radicale and Postgres. A direct re-read of an unchanged world gives exactly the outputs
(and so the fingerprints) the preview got through n8n — whatever the calendar holds: events with
non-ASCII text, a time zone, a recurrence, an all-day event; a change made between preview and
approval is caught by the direct re-read and the execute writes nothing; an approved execute makes
n8n executions for its writes only.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from countersign.approvals import Approvals
from countersign.execute import Executor, StaleWorldError
from countersign.kernel import Intent, Plan, Policy, system_clock
from countersign.n8n import N8nClient, N8nHandle
from countersign.planner.testing import signed_plan
from countersign.preview import run_preview
from countersign.registry import Registry
from countersign.sandbox import Radicale
from countersign.signer import KeyRing
from countersign.steps import N8nStepRunner, N8nTransport, StoreRecorder
from countersign.storage import Database

LOCAL = Policy(providers={"calendar": "caldav", "mail": "smtp", "chat": "slack"})
ORG, ALICE, BOB = "stale-org@example.com", "stale-alice@example.com", "stale-bob@example.com"

AWKWARD = [
    "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//t//EN\r\nBEGIN:VEVENT\r\nUID:u1\r\n"
    "DTSTAMP:20261101T000000Z\r\nDTSTART;TZID=Europe/Lisbon:20371123T133000\r\n"
    "DTEND;TZID=Europe/Lisbon:20371123T141500\r\nSUMMARY:Réunion — café ☕\r\n"
    "END:VEVENT\r\nEND:VCALENDAR\r\n",
    "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//t//EN\r\nBEGIN:VEVENT\r\nUID:u2\r\n"
    "DTSTAMP:20261101T000000Z\r\nDTSTART:20371116T160000Z\r\nDTEND:20371116T163000Z\r\n"
    "RRULE:FREQ=WEEKLY;COUNT=3\r\nSUMMARY:weekly\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n",
    "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//t//EN\r\nBEGIN:VEVENT\r\nUID:u3\r\n"
    "DTSTAMP:20261101T000000Z\r\nDTSTART;VALUE=DATE:20371124\r\nDTEND;VALUE=DATE:20371125\r\n"
    "SUMMARY:all day\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n",
]


def _put(radicale: Radicale, user: str, uid: str, ics: str) -> None:
    r = httpx.put(
        f"{radicale.calendar_url(user)}{uid}.ics",
        content=ics.encode(),
        headers={"Content-Type": "text/calendar"},
        timeout=5,
    )
    r.raise_for_status()


def _signed(registry: Registry, keyring: KeyRing, n: int) -> dict[str, Any]:
    now = datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    intent = Intent.model_validate(
        {
            "intent": "find_meeting_time",
            "intent_id": f"01JDQ3Z0000000000000S{n:05d}",
            "received_at": now,
            "user_id": ORG,
            "entities": {
                "participants": [ALICE, BOB],
                "duration_min": 30,
                "title": f"stale {n}",
                "window_start": "2037-11-23T13:00:00Z",
                "window_end": "2037-11-23T18:00:00Z",
            },
        }
    )
    return signed_plan(intent, keyring, registry, LOCAL)


@pytest.fixture
def calendars(radicale: Radicale) -> Radicale:
    for user in (ORG, ALICE, BOB):
        radicale.make_calendar(user)
        for name in radicale.events(user):
            httpx.delete(radicale.calendar_url(user) + name, timeout=5)
    for i, ics in enumerate(AWKWARD):
        _put(radicale, ALICE, f"awkward-{i}", ics)
    return radicale


def _plus_30(start: str) -> str:
    t = datetime.fromisoformat(start.replace("Z", "+00:00")) + timedelta(minutes=30)
    return t.isoformat().replace("+00:00", "Z")


def _approve(db: Database, doc: dict[str, Any], slot: dict[str, Any]) -> str:
    return (
        Approvals(db, clock=system_clock)
        .issue(
            plan_id=doc["plan"]["plan_id"],
            plan_hash=doc["plan_hash"],
            gate_id="gate-A",
            user_id=ORG,
            scopes=["calendar.write"],
            ttl_s=300,
            # the first 30 minutes of the free stretch: the signed length (a whole stretch
            # is not a choice the gate offers)
            choice={"start": slot["start"], "end": _plus_30(slot["start"])},
        )
        .token
    )


def test_direct_reread_equals_the_preview_then_catches_a_change(
    n8n: N8nHandle, db: Database, registry: Registry, keyring: KeyRing, calendars: Radicale
) -> None:
    settings = {"caldav_base_url": calendars.base_url, "smtp_from": "cs@example.com"}
    doc = _signed(registry, keyring, 1)

    async def go() -> None:
        async with N8nClient(n8n.base_url, n8n.api_key) as client:
            transport = N8nTransport(client)
            pv = await run_preview(
                doc,
                keys=keyring,
                registry=registry,
                transport=transport,
                recorder=StoreRecorder(db, clock=system_clock),
                settings=settings,
                actor=ORG,
                now=system_clock(),
            )
            assert pv.outputs[1]["busy"], "the awkward events are busy time"
            plan = Plan.model_validate(doc["plan"])
            runner = N8nStepRunner(
                plan=plan,
                plan_hash=doc["plan_hash"],
                registry=registry,
                transport=transport,
                settings=settings,
            )
            calls = transport.calls
            fresh = await runner.read_fresh([1, 2, 3])
            assert transport.calls == calls  # no n8n execution for the re-read
            assert fresh == pv.outputs  # the same outputs, hence the same fingerprints

            slot = pv.outputs[3]["slots"][-1]
            token = _approve(db, doc, slot)
            # the world moves after the preview: bob becomes busy inside the window
            calendars.add_event(BOB, "late", "20371123T170000Z", "20371123T173000Z")
            with pytest.raises(StaleWorldError) as info:
                await Executor(
                    keys=keyring, registry=registry, transport=transport, db=db, settings=settings
                ).execute(doc, user_id=ORG, tokens={"gate-A": token})
            assert [c.step for c in info.value.changes] == [2, 3]
            assert transport.calls == calls  # refused before any n8n execution

    asyncio.run(go())
    assert calendars.events(ORG) == []


def test_an_approved_execute_runs_only_its_write_on_n8n(
    n8n: N8nHandle, db: Database, registry: Registry, keyring: KeyRing, calendars: Radicale
) -> None:
    settings = {"caldav_base_url": calendars.base_url, "smtp_from": "cs@example.com"}
    doc = _signed(registry, keyring, 2)

    async def go() -> None:
        async with N8nClient(n8n.base_url, n8n.api_key) as client:
            transport = N8nTransport(client)
            pv = await run_preview(
                doc,
                keys=keyring,
                registry=registry,
                transport=transport,
                recorder=StoreRecorder(db, clock=system_clock),
                settings=settings,
                actor=ORG,
                now=system_clock(),
            )
            # the two CalDAV reads as one batch execution (issue 16.1); the overlap in-process
            assert transport.calls == 1
            token = _approve(db, doc, pv.outputs[3]["slots"][0])
            report = await Executor(
                keys=keyring, registry=registry, transport=transport, db=db, settings=settings
            ).execute(doc, user_id=ORG, tokens={"gate-A": token})
            assert report.status == "completed"
            assert transport.calls == 2  # + the write

    asyncio.run(go())
    assert len(calendars.events(ORG)) == 1
