"""A recurring meeting in a real CalDAV server is busy time through the project's read path.

Radicale stores a weekly Europe/Berlin series (with its VTIMEZONE, as a CalDAV client PUTs it);
the preview of a signed ``find_meeting_time`` plan reads both calendars through n8n's HTTP Request
node (the ``caldav.list_free_busy`` GET) and the overlap step. The series started weeks before the
window, in summer time: a reader that takes the Berlin wall time as UTC, or ignores RRULE, reports
the hour free and offers it as the first slot.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from countersign.kernel import Intent, Policy, system_clock
from countersign.n8n import N8nClient, N8nHandle
from countersign.planner.testing import signed_plan
from countersign.preview import run_preview
from countersign.registry import Registry
from countersign.sandbox import Radicale
from countersign.signer import KeyRing
from countersign.steps import N8nTransport, StoreRecorder
from countersign.storage import Database

pytestmark = pytest.mark.slow

LOCAL = Policy(providers={"calendar": "caldav", "mail": "smtp", "chat": "slack"})
ALICE, BOB = "alice.rrule@example.com", "bob.rrule@example.com"

# As Apple Calendar / DAVx5 PUT it: a VTIMEZONE block, a TZID start, a weekly rule, one EXDATE.
_SERIES = """BEGIN:VCALENDAR\r
VERSION:2.0\r
PRODID:-//Apple Inc.//macOS 15.1//EN\r
CALSCALE:GREGORIAN\r
BEGIN:VTIMEZONE\r
TZID:Europe/Berlin\r
BEGIN:DAYLIGHT\r
TZOFFSETFROM:+0100\r
RRULE:FREQ=YEARLY;BYMONTH=3;BYDAY=-1SU\r
DTSTART:19810329T020000\r
TZNAME:CEST\r
TZOFFSETTO:+0200\r
END:DAYLIGHT\r
BEGIN:STANDARD\r
TZOFFSETFROM:+0200\r
RRULE:FREQ=YEARLY;BYMONTH=10;BYDAY=-1SU\r
DTSTART:19961027T030000\r
TZNAME:CET\r
TZOFFSETTO:+0100\r
END:STANDARD\r
END:VTIMEZONE\r
BEGIN:VEVENT\r
UID:weekly-berlin-1@example.org\r
DTSTAMP:20261001T090000Z\r
DTSTART;TZID=Europe/Berlin:20261005T150000\r
DTEND;TZID=Europe/Berlin:20261005T160000\r
RRULE:FREQ=WEEKLY;BYDAY=MO\r
EXDATE;TZID=Europe/Berlin:20371116T150000\r
SUMMARY:Weekly planning\r
TRANSP:OPAQUE\r
END:VEVENT\r
END:VCALENDAR\r
"""


def _signed(registry: Registry, keyring: KeyRing) -> dict[str, Any]:
    intent = Intent.model_validate(
        {
            "intent": "find_meeting_time",
            "intent_id": "01JDQ3Z000000000000000CA1D",
            # a plan is valid for its TTL from here
            "received_at": datetime.now(UTC).replace(microsecond=0).isoformat(),
            "user_id": ALICE,
            "entities": {
                "participants": [ALICE, BOB],
                "duration_min": 60,
                "title": "Find a time",
                "window_start": "2037-11-23T13:00:00Z",
                "window_end": "2037-11-23T18:00:00Z",
            },
        }
    )
    return signed_plan(intent, keyring, registry, LOCAL)


def test_weekly_tzid_series_in_radicale_is_busy_in_the_preview(
    n8n: N8nHandle, db: Database, registry: Registry, keyring: KeyRing, radicale: Radicale
) -> None:
    for user in (ALICE, BOB):
        radicale.make_calendar(user)
    r = httpx.put(
        radicale.calendar_url(BOB) + "weekly-berlin-1.ics",
        content=_SERIES,
        headers={"Content-Type": "text/calendar"},
        timeout=10,
    )
    assert r.status_code in (201, 204), r.text[:200]
    doc = _signed(registry, keyring)

    async def go() -> Any:
        async with N8nClient(n8n.base_url, n8n.api_key) as client:
            return await run_preview(
                doc,
                keys=keyring,
                registry=registry,
                transport=N8nTransport(client),
                recorder=StoreRecorder(db, clock=system_clock),
                settings={"caldav_base_url": radicale.base_url},
                actor=ALICE,
                now=system_clock(),
            )

    steps = asyncio.run(go()).wrapper.normalized["steps"]
    assert steps["1"]["busy"] == []
    # 2037-11-23 is a Monday in winter time: 15:00-16:00 Berlin is 14:00-15:00 UTC
    assert steps["2"]["busy"] == [["2037-11-23T14:00:00Z", "2037-11-23T15:00:00Z"]]
    slots = [(s["start"], s["end"]) for s in steps["3"]["slots"]]
    assert slots == [
        ("2037-11-23T13:00:00.000Z", "2037-11-23T14:00:00.000Z"),
        ("2037-11-23T15:00:00.000Z", "2037-11-23T18:00:00.000Z"),
    ]
