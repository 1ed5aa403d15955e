"""Calendar reads ask for the window, and the staleness re-check revalidates (issue 28 §1).

Real n8n, Radicale (behind a counting proxy) and Postgres. The preview's calendar reads are
``calendar-query`` REPORTs on n8n; the execute-time re-check sends ONE etag-only query per
calendar when nothing changed (counted at the proxy), and still refuses when an event was added
inside the window. An event added outside the window is not a change of the window: the execute
goes on, again with one request per calendar.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from countersign.approvals import Approvals
from countersign.execute import Executor, StaleWorldError
from countersign.kernel import Intent, Policy, source_registry_dir, system_clock
from countersign.n8n import N8nClient, N8nHandle
from countersign.planner.testing import signed_plan
from countersign.preview import run_preview
from countersign.registry import Registry, load_registry
from countersign.sandbox import Radicale
from countersign.sandbox.caldav import CaldavRequest, CountingProxy, counting_proxy
from countersign.signer import KeyRing
from countersign.steps import N8nTransport, StoreRecorder
from countersign.storage import Database
from countersign.workflowbuilder import declared_query

LOCAL = Policy(providers={"calendar": "caldav", "mail": "smtp", "chat": "slack"})
ORG, ALICE, BOB = "win-org@example.com", "win-alice@example.com", "win-bob@example.com"
WEEKLY = (
    "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//t//EN\r\nBEGIN:VEVENT\r\nUID:weekly\r\n"
    "DTSTAMP:20261101T000000Z\r\nDTSTART:20300107T140000Z\r\nDTEND:20300107T143000Z\r\n"
    "RRULE:FREQ=WEEKLY\r\nSUMMARY:since 2030\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"
)


#: runs once the registry binds the calendar read as a window query (the caldav op's switch)
pytestmark = pytest.mark.skipif(
    declared_query(load_registry(source_registry_dir()).op("caldav", "list_free_busy")) is None,
    reason="caldav.list_free_busy is not a calendar-query REPORT in this registry",
)


@pytest.fixture
def calendars(radicale: Radicale) -> Iterator[tuple[Radicale, CountingProxy]]:
    for user in (ORG, ALICE, BOB):
        radicale.make_calendar(user)
        for name in radicale.events(user):
            httpx.delete(radicale.calendar_url(user) + name, timeout=5)
    r = httpx.put(
        f"{radicale.calendar_url(BOB)}weekly.ics",
        content=WEEKLY,
        headers={"Content-Type": "text/calendar"},
        timeout=5,
    )
    r.raise_for_status()
    # many events outside the window: what the server no longer sends
    radicale.add_event(ALICE, "other-week", "20371130T140000Z", "20371130T150000Z")
    with counting_proxy(radicale.base_url) as proxy:
        yield radicale, proxy


def _signed(registry: Registry, keyring: KeyRing, n: int) -> dict[str, Any]:
    now = datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    intent = Intent.model_validate(
        {
            "intent": "find_meeting_time",
            "intent_id": f"01JDQ3Z0000000000000W{n:05d}",
            "received_at": now,
            "user_id": ORG,
            "entities": {
                "participants": [ALICE, BOB],
                "duration_min": 30,
                "title": f"window {n}",
                "window_start": "2037-11-23T13:00:00Z",
                "window_end": "2037-11-23T18:00:00Z",
            },
        }
    )
    return signed_plan(intent, keyring, registry, LOCAL)


def _token(db: Database, doc: dict[str, Any], start: str, end: str) -> str:
    return (
        Approvals(db, clock=system_clock)
        .issue(
            plan_id=doc["plan"]["plan_id"],
            plan_hash=doc["plan_hash"],
            gate_id="gate-A",
            user_id=ORG,
            scopes=["calendar.write"],
            ttl_s=300,
            choice={"start": start, "end": end},
        )
        .token
    )


def _reads(requests: list[CaldavRequest]) -> list[tuple[str, bool]]:
    """(method, asked for calendar data) of every request but the writes."""
    return [(r.method, r.calendar_data) for r in requests if r.method not in ("PUT", "DELETE")]


async def _preview_and_execute(
    n8n: N8nHandle,
    db: Database,
    registry: Registry,
    keyring: KeyRing,
    proxy: CountingProxy,
    n: int,
    change: Any,
) -> tuple[list[CaldavRequest], list[CaldavRequest], Exception | None]:
    settings = {"caldav_base_url": proxy.base_url, "smtp_from": "cs@example.com"}
    doc = _signed(registry, keyring, n)
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
        assert pv.outputs[2]["busy"] == [["2037-11-23T14:00:00Z", "2037-11-23T14:30:00Z"]]
        previewed = proxy.take()
        token = _token(db, doc, "2037-11-23T16:00:00Z", "2037-11-23T16:30:00Z")
        change()
        proxy.take()
        executor = Executor(
            keys=keyring, registry=registry, transport=transport, db=db, settings=settings
        )
        try:
            await executor.execute(doc, user_id=ORG, tokens={"gate-A": token})
        except StaleWorldError as e:
            return previewed, proxy.take(), e
        return previewed, proxy.take(), None


def test_preview_asks_for_the_window_and_an_unchanged_world_costs_one_request_per_calendar(
    n8n: N8nHandle,
    db: Database,
    registry: Registry,
    keyring: KeyRing,
    calendars: tuple[Radicale, CountingProxy],
) -> None:
    radicale, proxy = calendars
    previewed, executed, error = asyncio.run(
        _preview_and_execute(n8n, db, registry, keyring, proxy, 1, lambda: None)
    )
    # the preview: one calendar-query per attendee (a REPORT with a body, Depth 1), no GET
    assert sorted((r.method, r.depth, r.calendar_data) for r in previewed) == [
        ("REPORT", "1", True),
        ("REPORT", "1", True),
    ]
    assert error is None
    # the re-check: one etag-only query per calendar, nothing read again; then the write
    assert _reads(executed) == [("REPORT", False), ("REPORT", False)]
    assert [r.method for r in executed if r.method == "PUT"] == ["PUT"]
    assert len(radicale.events(ORG)) == 1


def test_an_event_added_inside_the_window_is_stale(
    n8n: N8nHandle,
    db: Database,
    registry: Registry,
    keyring: KeyRing,
    calendars: tuple[Radicale, CountingProxy],
) -> None:
    radicale, proxy = calendars

    def busy_at_four() -> None:
        radicale.add_event(BOB, "late", "20371123T160000Z", "20371123T163000Z")

    _, executed, error = asyncio.run(
        _preview_and_execute(n8n, db, registry, keyring, proxy, 2, busy_at_four)
    )
    assert isinstance(error, StaleWorldError)
    assert 2 in [c.step for c in error.changes]
    # one etag-only query per calendar, then bob's window read again (alice's was unchanged)
    assert sorted(_reads(executed)) == [("REPORT", False), ("REPORT", False), ("REPORT", True)]
    assert [r for r in executed if r.method == "PUT"] == []
    assert radicale.events(ORG) == []


def test_an_event_added_outside_the_window_is_not_a_change(
    n8n: N8nHandle,
    db: Database,
    registry: Registry,
    keyring: KeyRing,
    calendars: tuple[Radicale, CountingProxy],
) -> None:
    """Chosen: the re-check guards what the plan read — the window. An event a week later is
    not in it; the execute goes on with one request per calendar."""
    radicale, proxy = calendars

    def next_week() -> None:
        radicale.add_event(BOB, "next-week", "20371130T160000Z", "20371130T163000Z")

    _, executed, error = asyncio.run(
        _preview_and_execute(n8n, db, registry, keyring, proxy, 3, next_week)
    )
    assert error is None
    assert _reads(executed) == [("REPORT", False), ("REPORT", False)]
    assert len(radicale.events(ORG)) == 1
