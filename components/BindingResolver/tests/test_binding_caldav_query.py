"""A calendar read that asks the server for the window (issue 28 §1): the calendar-query body,
the multistatus answer, and — against the real Radicale — the same busy time as reading the whole
collection, recurring series included."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from countersign.binding import CalendarError, CalendarWindowError, ics_busy, normalize_output
from countersign.binding.caldav import caldav_busy, caldav_query, read_multistatus
from countersign.sandbox.caldav import Radicale

_MS = (
    '<?xml version="1.0"?><multistatus xmlns="DAV:" xmlns:C="urn:ietf:params:xml:ns:caldav">'
    "{}</multistatus>"
)
_EVENT = (
    "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:t\r\nBEGIN:VEVENT\r\nUID:{uid}\r\n"
    "DTSTAMP:20260101T000000Z\r\nDTSTART:{start}\r\nDTEND:{end}\r\n{extra}END:VEVENT\r\n"
    "END:VCALENDAR\r\n"
)


def _response(href: str, etag: str | None, data: str | None, status: str = "200 OK") -> str:
    props = (f"<getetag>{etag}</getetag>" if etag is not None else "") + (
        f"<C:calendar-data>{data}</C:calendar-data>" if data is not None else ""
    )
    return (
        f"<response><href>{href}</href><propstat><prop>{props}</prop>"
        f"<status>HTTP/1.1 {status}</status></propstat></response>"
    )


def test_query_asks_for_the_widened_window_in_caldav_utc() -> None:
    body = caldav_query("2026-11-23T09:00:00+01:00", "2026-11-23T17:30:00.5Z")
    # two days on each side, rounded outward to the second (the margin ics_busy reads with)
    assert '<C:time-range start="20261121T080000Z" end="20261125T173001Z"/>' in body
    assert "<C:calendar-data/>" in body
    assert "<C:calendar-data/>" not in caldav_query("2026-11-23T09:00:00Z", None, data=False)
    assert "time-range" not in caldav_query(None, None)
    assert 'start="20261121T090000Z"/>' in caldav_query("2026-11-23T09:00:00Z", None)


@pytest.mark.parametrize(
    ("lo", "hi"),
    [
        ("2026-11-23T09:00:00", "2026-11-24T09:00:00Z"),  # no zone
        ("tomorrow", "2026-11-24T09:00:00Z"),
        ("2026-11-24T09:00:00Z", "2026-11-18T09:00:00Z"),  # ends (well) before it starts
        ('2026-11-23T09:00:00Z"/><x a="', None),  # nothing but a time reaches the XML
    ],
)
def test_query_refuses_an_unusable_window(lo: str, hi: str | None) -> None:
    with pytest.raises(CalendarWindowError):
        caldav_query(lo, hi)


def test_multistatus_gives_objects_and_versions() -> None:
    a = _EVENT.format(uid="a", start="20261123T100000Z", end="20261123T110000Z", extra="")
    text = _MS.format(_response("/u/c/a.ics", '"1"', a) + _response("/u/c/b.ics", '"2"', a))
    calendars, versions = read_multistatus(text)
    assert versions == {"/u/c/a.ics": '"1"', "/u/c/b.ics": '"2"'}
    assert calendars.count("BEGIN:VCALENDAR") == 2
    only = _MS.format(_response("/u/c/a.ics", '"1"', None))
    assert read_multistatus(only, data=False) == ("", {"/u/c/a.ics": '"1"'})
    out = caldav_busy(text, 207, time_min="2026-11-23T00:00:00Z", time_max="2026-11-24T00:00:00Z")
    assert out["busy"] == [["2026-11-23T10:00:00Z", "2026-11-23T11:00:00Z"]] * 2
    assert out["versions"] == versions
    # normalize_output reads the multistatus of a REPORT, and iCalendar text as before
    item = {"statusCode": 207, "body": text}
    args = {"time_min": "2026-11-23T00:00:00Z", "time_max": "2026-11-24T00:00:00Z"}
    assert normalize_output("ics_busy", item, args) == out
    assert normalize_output("ics_busy", {"statusCode": 200, "body": a}, args) == {
        "status": 200,
        "busy": [["2026-11-23T10:00:00Z", "2026-11-23T11:00:00Z"]],
    }


@pytest.mark.parametrize(
    "text",
    [
        "<html>forbidden</html>",  # not a multistatus
        "<multistatus",  # not XML
        _MS.format(_response("/a", '"1"', None)),  # no calendar data
        _MS.format(_response("/a", None, "BEGIN:VCALENDAR")),  # no etag
        _MS.format(_response("/a", '"1"', "x", status="404 Not Found")),  # a property in error
        _MS.format("<response><href>/a</href><status>HTTP/1.1 403 Forbidden</status></response>"),
        _MS.format(_response("/a", '"1"', "BEGIN:VCALENDAR") * 2),  # one href twice
        _MS.format("<response><propstat/></response>"),  # no href
        '<?xml version="1.0"?><!DOCTYPE m [<!ENTITY e "x">]>' + _MS.format(""),  # entities
    ],
)
def test_an_unreadable_answer_is_an_error_never_free_time(text: str) -> None:
    with pytest.raises(CalendarError):
        normalize_output("ics_busy", {"statusCode": 207, "body": text}, {})


@pytest.mark.parametrize("body", ["", "  ", {"busy": []}, ["x"], 3])
def test_an_empty_207_or_an_answer_that_is_not_text_is_an_error(body: Any) -> None:
    """n8n's autodetected format gives a JSON answer as an object: not a calendar, not free."""
    status = 207 if isinstance(body, str) else 200
    with pytest.raises(CalendarError):
        normalize_output("ics_busy", {"statusCode": status, "body": body}, {})


# ---- the real server -----------------------------------------------------------------------
_WEEKLY = (
    "RRULE:FREQ=WEEKLY;BYDAY=MO\r\nEXDATE:20261130T100000Z\r\n"  # a series since 2020, one skipped
)
_OVERRIDE = (
    "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:t\r\nBEGIN:VEVENT\r\nUID:weekly\r\n"
    "DTSTAMP:20260101T000000Z\r\nDTSTART:20200106T100000Z\r\nDTEND:20200106T110000Z\r\n"
    f"{_WEEKLY}END:VEVENT\r\nBEGIN:VEVENT\r\nUID:weekly\r\nDTSTAMP:20260101T000000Z\r\n"
    "RECURRENCE-ID:20261207T100000Z\r\nDTSTART:20261207T150000Z\r\nDTEND:20261207T160000Z\r\n"
    "END:VEVENT\r\nEND:VCALENDAR\r\n"
)
_FLOATING = _EVENT.format(
    uid="floating", start="20261123T233000", end="20261124T003000", extra="SUMMARY:late\r\n"
)


def _put(server: Radicale, user: str, uid: str, text: str) -> None:
    r = httpx.put(
        f"{server.calendar_url(user)}{uid}.ics",
        content=text,
        headers={"Content-Type": "text/calendar"},
        timeout=10,
    )
    assert r.status_code in (201, 204), r.text


def _report(server: Radicale, user: str, lo: str | None, hi: str | None) -> str:
    r = httpx.request(
        "REPORT",
        server.calendar_url(user),
        content=caldav_query(lo, hi),
        headers={"Depth": "1", "Content-Type": "application/xml"},
        timeout=30,
    )
    assert r.status_code == 207, r.text
    return r.text


@pytest.mark.parametrize(
    ("lo", "hi", "series"),
    [
        ("2026-11-23T00:00:00Z", "2026-11-24T00:00:00Z", True),
        # the skipped Monday: no instance within two days of it, so the server leaves it out
        ("2026-11-30T00:00:00Z", "2026-12-01T00:00:00Z", False),
        ("2026-12-07T00:00:00Z", "2026-12-08T00:00:00Z", True),  # the moved Monday
        ("2026-11-23T23:00:00+01:00", "2026-11-24T02:00:00+01:00", True),  # the floating one
        ("2021-03-01T00:00:00Z", "2021-03-09T00:00:00Z", True),  # an old stretch of the series
    ],
)
def test_the_window_from_radicale_is_the_window_of_the_whole_calendar(
    radicale: Radicale, lo: str, hi: str, series: bool
) -> None:
    user = "window-query@example.com"
    radicale.make_calendar(user)
    _put(radicale, user, "weekly", _OVERRIDE)
    _put(radicale, user, "floating", _FLOATING)
    for day in range(1, 29):  # one event a day in February 2027: all outside every window
        start, end = f"202702{day:02d}T090000Z", f"202702{day:02d}T100000Z"
        _put(
            radicale,
            user,
            f"feb{day}",
            _EVENT.format(uid=f"feb{day}", start=start, end=end, extra=""),
        )
    whole = httpx.get(radicale.calendar_url(user), timeout=30).text
    answer = _report(radicale, user, lo, hi)
    out = caldav_busy(answer, 207, time_min=lo, time_max=hi)
    assert out["busy"] == ics_busy(whole, time_min=lo, time_max=hi)
    # the server returned the series when an instance is near the window, nothing of February
    assert any(h.endswith("/weekly.ics") for h in out["versions"]) is series
    assert not any("/feb" in h for h in out["versions"])
