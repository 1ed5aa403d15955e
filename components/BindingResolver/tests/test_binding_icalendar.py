"""Reading calendars as their owners wrote them, and writing events any reader takes back.

The fixtures under ``fixtures/`` are written the way Google Calendar, Apple Calendar and
Thunderbird export (property order, VTIMEZONE blocks, X-WR-TIMEZONE, folding, VALARMs), with
made-up people and rooms. Each expected interval is worked out by hand from the zone rules and
written as UTC; each test says what a wrong reader would report instead.
"""

from __future__ import annotations

import unicodedata
from datetime import UTC, date, datetime, timedelta, tzinfo
from pathlib import Path
from zoneinfo import ZoneInfo, available_timezones

import icalendar
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from countersign.binding import (
    CalendarError,
    CalendarWindowError,
    ics_busy,
    ics_event,
    normalize_output,
)
from countersign.kernel import BindingError

FIXTURES = Path(__file__).parent / "fixtures"
WRITTEN = datetime(2026, 11, 20, 9, 15, 7, tzinfo=UTC)  # when an event is written (a DTSTAMP)


def _read(name: str) -> str:
    # newline="" keeps the CRLF line ends the exporters write
    with open(FIXTURES / name, encoding="utf-8", newline="") as f:
        return f.read()


def _busy(name: str, lo: str, hi: str, floating_tz: tzinfo = UTC) -> list[list[str]]:
    return ics_busy(_read(name), time_min=lo, time_max=hi, floating_tz=floating_tz)


# ---- real exports ------------------------------------------------------------------------------
def test_google_export_weekly_series_with_exdate_override_cancelled_and_dst() -> None:
    """Google Calendar: X-WR-TIMEZONE, VTIMEZONE, two weekly series (EXDATE, a moved and a
    cancelled occurrence), all-day events busy and transparent, a cancelled and a transparent
    one-off, a folded RRULE; Berlin leaves summer time on 2026-10-25, inside the window.

    Today's reader reports the Berlin wall times as UTC, expands no RRULE (so both series are
    free time), and reports cancelled and transparent events as busy."""
    assert _busy("google_berlin_weekly.ics", "2026-10-12T00:00:00Z", "2026-11-03T00:00:00Z") == [
        ["2026-10-12T07:30:00Z", "2026-10-12T08:30:00Z"],  # Team sync, CEST
        ["2026-10-14T14:00:00Z", "2026-10-14T14:30:00Z"],  # 1:1, CEST
        # Team sync 2026-10-19 is an EXDATE; the 1:1 on 2026-10-21 is cancelled
        ["2026-10-19T22:00:00Z", "2026-10-21T22:00:00Z"],  # Conference, all day in Berlin
        ["2026-10-26T08:30:00Z", "2026-10-26T09:30:00Z"],  # Team sync, CET: one hour later in UTC
        ["2026-10-28T15:00:00Z", "2026-10-28T15:30:00Z"],  # 1:1, CET
        ["2026-11-02T13:00:00Z", "2026-11-02T14:00:00Z"],  # Team sync moved (RECURRENCE-ID)
    ]


def test_tzid_without_vtimezone_block_uses_the_iana_rules() -> None:
    """A CalDAV client that names the zone but sends no VTIMEZONE: New York leaves summer time
    on 2026-11-01, between the second and third Friday review."""
    assert _busy("tzid_without_vtimezone.ics", "2026-10-20T00:00:00Z", "2026-11-10T00:00:00Z") == [
        ["2026-10-23T21:00:00Z", "2026-10-23T22:00:00Z"],
        ["2026-10-30T21:00:00Z", "2026-10-30T22:00:00Z"],
        ["2026-11-04T14:00:00Z", "2026-11-04T15:00:00Z"],  # Planning, EST
        ["2026-11-06T22:00:00Z", "2026-11-06T23:00:00Z"],  # COUNT=3: the third, in EST
    ]


def test_apple_export_floating_all_day_and_window_edges() -> None:
    """Apple Calendar: a floating time and an all-day event are the owner's local time (passed
    in: the calendar names no zone); events straddling either edge of the half-open window are
    busy with their real times; one ending exactly at the start and one starting exactly at the
    end are not; an all-day TRANSP:TRANSPARENT holiday is free, one without TRANSP is busy."""
    la = ZoneInfo("America/Los_Angeles")
    assert _busy("apple_los_angeles.ics", "2026-11-23T08:00:00Z", "2026-11-26T08:00:00Z", la) == [
        ["2026-11-23T07:00:00Z", "2026-11-23T09:00:00Z"],  # straddles the start
        ["2026-11-23T17:00:00Z", "2026-11-23T18:00:00Z"],  # Design review, PST
        ["2026-11-24T16:00:00Z", "2026-11-24T17:00:00Z"],  # Gym, floating 08:00 in LA
        ["2026-11-25T08:00:00Z", "2026-11-26T08:00:00Z"],  # Offsite, all day in LA
        ["2026-11-26T07:00:00Z", "2026-11-26T09:00:00Z"],  # straddles the end
    ]


def test_floating_times_default_to_utc_when_no_zone_is_known() -> None:
    busy = _busy("apple_los_angeles.ics", "2026-11-24T00:00:00Z", "2026-11-25T12:00:00Z")
    assert ["2026-11-24T08:00:00Z", "2026-11-24T09:00:00Z"] in busy
    assert ["2026-11-25T00:00:00Z", "2026-11-26T00:00:00Z"] in busy


def test_several_vcalendars_in_one_response() -> None:
    """Thunderbird items concatenated (as a collection export or a REPORT's calendar-data):
    each VCALENDAR is read with its own VTIMEZONE; a DURATION instead of DTEND; London leaves
    summer time on 2026-10-25, between the second and third standup."""
    busy = _busy("thunderbird_two_calendars.ics", "2026-10-23T00:00:00Z", "2026-10-27T00:00:00Z")
    assert busy == [
        ["2026-10-23T08:00:00Z", "2026-10-23T08:15:00Z"],
        ["2026-10-24T08:00:00Z", "2026-10-24T08:15:00Z"],
        ["2026-10-24T12:00:00Z", "2026-10-24T13:00:00Z"],  # Dentist, second VCALENDAR
        ["2026-10-25T09:00:00Z", "2026-10-25T09:15:00Z"],
        ["2026-10-26T09:00:00Z", "2026-10-26T09:15:00Z"],
    ]


def test_recurrences_are_expanded_only_inside_the_window() -> None:
    """An endless weekly series read for one week gives one occurrence, and a window long before
    or after the series gives none (today's reader returns the first DTSTART or nothing)."""
    text = _read("google_berlin_weekly.ics")
    week = ics_busy(text, time_min="2027-03-01T00:00:00Z", time_max="2027-03-08T00:00:00Z")
    assert week == [["2027-03-01T08:30:00Z", "2027-03-01T09:30:00Z"]]
    assert ics_busy(text, time_min="2026-01-01T00:00:00Z", time_max="2026-01-08T00:00:00Z") == []
    # summer time again in 2027 (from 2027-03-28): 09:30 Berlin is 07:30 UTC
    assert ics_busy(text, time_min="2027-04-05T00:00:00Z", time_max="2027-04-06T00:00:00Z") == [
        ["2027-04-05T07:30:00Z", "2027-04-05T08:30:00Z"]
    ]


def test_folded_lines_anywhere_are_unfolded() -> None:
    """RFC 5545 §3.1: a fold may split a line anywhere, even inside a parameter or a value."""
    cal = (
        "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//x//EN\r\nBEGIN:VEVENT\r\nUID:f1\r\n"
        "DTSTAMP:20261101T000000Z\r\nDTSTART;TZID=Europe/Be\r\n rlin:20261123T0900\r\n\t00\r\n"
        "DTEND;TZID=Europe/Berlin:20261123T100000\r\nRRULE:FREQ=DAI\r\n LY;COUNT=2\r\n"
        "END:VEVENT\r\nEND:VCALENDAR\r\n"
    )
    assert ics_busy(cal, time_min="2026-11-23T00:00:00Z", time_max="2026-11-25T00:00:00Z") == [
        ["2026-11-23T08:00:00Z", "2026-11-23T09:00:00Z"],
        ["2026-11-24T08:00:00Z", "2026-11-24T09:00:00Z"],
    ]


def test_cancelled_series_and_zero_length_events_take_no_time() -> None:
    cal = (
        "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//x//EN\r\n"
        "BEGIN:VEVENT\r\nUID:c1\r\nDTSTAMP:20261101T000000Z\r\nSTATUS:CANCELLED\r\n"
        "DTSTART:20261123T090000Z\r\nDTEND:20261123T100000Z\r\nRRULE:FREQ=DAILY\r\nEND:VEVENT\r\n"
        "BEGIN:VEVENT\r\nUID:z1\r\nDTSTAMP:20261101T000000Z\r\nDTSTART:20261123T120000Z\r\n"
        "END:VEVENT\r\nEND:VCALENDAR\r\n"
    )
    assert ics_busy(cal, time_min="2026-11-23T00:00:00Z", time_max="2026-11-30T00:00:00Z") == []


# ---- the window and refusals ------------------------------------------------------------------
def test_without_a_window_only_bounded_calendars_are_listed() -> None:
    bounded = _read("tzid_without_vtimezone.ics")
    assert len(ics_busy(bounded)) == 4
    assert ics_busy(bounded, time_min="2026-11-05T00:00:00Z") == [
        ["2026-11-06T22:00:00Z", "2026-11-06T23:00:00Z"]
    ]
    assert ics_busy(bounded, time_max="2026-10-24T00:00:00Z") == [
        ["2026-10-23T21:00:00Z", "2026-10-23T22:00:00Z"]
    ]
    with pytest.raises(CalendarWindowError, match=r"5k2j9h4q1p7r3s8t0v6w2x4y1z@google\.com"):
        ics_busy(_read("google_berlin_weekly.ics"), time_min="2026-10-12T00:00:00Z")


@pytest.mark.parametrize(
    ("lo", "hi", "match"),
    [
        ("2026-11-23T00:00:00", "2026-11-24T00:00:00Z", "time_min .* time zone"),
        ("2026-11-23T00:00:00Z", "tomorrow", "time_max .* ISO 8601"),
        ("2026-11-24T00:00:00Z", "2026-11-23T00:00:00Z", "ends before it starts"),
    ],
)
def test_a_bad_window_is_refused(lo: str, hi: str, match: str) -> None:
    with pytest.raises(CalendarWindowError, match=match) as e:
        ics_busy(_read("apple_los_angeles.ics"), time_min=lo, time_max=hi)
    assert e.value.code == "calendar_window" and isinstance(e.value, BindingError)


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ("<html>Service unavailable</html>", "not iCalendar"),
        ("BEGIN:VEVENT\r\nUID:a\r\nEND:VEVENT\r\n", "VCALENDAR"),
        (
            "BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nUID:bad1\r\nDTSTART:tomorrow\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n",
            "bad1.*DTSTART",
        ),
        (
            "BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nUID:nostart\r\nSUMMARY:x\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n",
            "nostart.*DTSTART",
        ),
        (
            "BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nUID:tz1\r\nDTSTART;TZID=Mars/Olympus:20261123T090000\r\n"
            "DTEND;TZID=Mars/Olympus:20261123T100000\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n",
            "tz1.*Mars/Olympus",
        ),
    ],
)
def test_an_unreadable_calendar_is_an_error_not_free_time(body: str, match: str) -> None:
    """Today's reader answers "free" for every one of these."""
    with pytest.raises(CalendarError, match=match) as e:
        ics_busy(body, time_min="2026-11-23T00:00:00Z", time_max="2026-11-24T00:00:00Z")
    assert e.value.code == "calendar_unreadable"


def test_normalize_output_reads_with_the_step_window() -> None:
    item = {"statusCode": 200, "body": _read("google_berlin_weekly.ics")}
    args = {"user": "a@example.com", "time_min": "2026-10-26T00:00:00Z"}
    out = normalize_output("ics_busy", item, {**args, "time_max": "2026-10-27T00:00:00Z"})
    assert out == {"status": 200, "busy": [["2026-10-26T08:30:00Z", "2026-10-26T09:30:00Z"]]}


# ---- the property: any weekly series in any IANA zone -----------------------------------------
_ZONES = sorted(z for z in available_timezones() if "/" in z and not z.startswith("Etc/"))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    zone=st.sampled_from(_ZONES),
    first=st.dates(min_value=date(2020, 1, 1), max_value=date(2030, 12, 31)),
    hour=st.integers(0, 23),
    minute=st.sampled_from([0, 15, 30, 45]),
    minutes=st.integers(15, 180),
    count=st.integers(1, 30),
    lo_days=st.integers(-14, 200),
    span_days=st.integers(1, 120),
    with_vtimezone=st.booleans(),
)
def test_weekly_series_in_any_zone_matches_zoneinfo(
    zone: str,
    first: date,
    hour: int,
    minute: int,
    minutes: int,
    count: int,
    lo_days: int,
    span_days: int,
    with_vtimezone: bool,
) -> None:
    """Every occurrence that overlaps the window is reported, starting at the UTC instant
    zoneinfo gives for its wall time (RFC 5545 §3.3.5: a wall time in a gap is read with the
    offset before the gap, one that occurs twice as the first; zoneinfo's ``fold=0`` does both)
    and lasting the first instance's exact duration (§3.8.5.3), and nothing else is."""
    tz = ZoneInfo(zone)
    local = datetime(first.year, first.month, first.day, hour, minute)
    tzid, vtz = zone, ""
    if with_vtimezone:  # under a name no database knows, so only the block can define it
        # exporters write observances from well before the first event (a block starting just
        # before it leaves the reader guessing the offset in force before its first transition)
        tzid = f"Exported/{zone}"
        vtz = (
            icalendar.Timezone.from_tzinfo(
                tz,
                tzid=tzid,
                first_date=first - timedelta(days=800),
                last_date=first + timedelta(days=800),
            )
            .to_ical()
            .decode()
        )
    text = (
        "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//hypothesis//EN\r\n" + vtz + "BEGIN:VEVENT\r\n"
        "UID:prop-1\r\nDTSTAMP:20200101T000000Z\r\n"
        f"DTSTART;TZID={tzid}:{local:%Y%m%dT%H%M%S}\r\n"
        f"DTEND;TZID={tzid}:{local + timedelta(minutes=minutes):%Y%m%dT%H%M%S}\r\n"
        f"RRULE:FREQ=WEEKLY;COUNT={count}\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"
    )
    lo = datetime(first.year, first.month, first.day, tzinfo=UTC) + timedelta(days=lo_days)
    hi = lo + timedelta(days=span_days)
    first_end = (local + timedelta(minutes=minutes)).replace(tzinfo=tz)
    exact = first_end.astimezone(UTC) - local.replace(tzinfo=tz).astimezone(UTC)
    expected = []
    for k in range(count):
        s = (local + timedelta(weeks=k)).replace(tzinfo=tz).astimezone(UTC)
        e = s + exact
        if s < hi and e > lo and e > s:
            expected.append([f"{s:%Y-%m-%dT%H:%M:%SZ}", f"{e:%Y-%m-%dT%H:%M:%SZ}"])
    got = ics_busy(text, time_min=lo.isoformat(), time_max=hi.isoformat())
    assert got == expected


@pytest.mark.parametrize(
    ("dtstart", "dtend", "expected"),
    [
        # 2027-03-14 02:30 does not exist in New York: read with the offset before the gap
        # (03:30 EDT), lasting an hour like the first instance; the library alone drops it.
        (
            "20270307T023000",
            "20270307T033000",
            [
                ["2027-03-07T07:30:00Z", "2027-03-07T08:30:00Z"],
                ["2027-03-14T07:30:00Z", "2027-03-14T08:30:00Z"],
            ],
        ),
        # 2027-11-07 01:30 happens twice: the first (EDT) is meant; an exact 30 minutes
        (
            "20271031T013000",
            "20271031T020000",
            [
                ["2027-10-31T05:30:00Z", "2027-10-31T06:00:00Z"],
                ["2027-11-07T05:30:00Z", "2027-11-07T06:00:00Z"],
            ],
        ),
    ],
)
def test_occurrences_on_a_dst_change_keep_their_exact_duration(
    dtstart: str, dtend: str, expected: list[list[str]]
) -> None:
    cal = (
        "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//x//EN\r\nBEGIN:VEVENT\r\nUID:d1\r\n"
        f"DTSTAMP:20261101T000000Z\r\nDTSTART;TZID=America/New_York:{dtstart}\r\n"
        f"DTEND;TZID=America/New_York:{dtend}\r\nRRULE:FREQ=WEEKLY;COUNT=2\r\n"
        "END:VEVENT\r\nEND:VCALENDAR\r\n"
    )
    assert (
        ics_busy(cal, time_min="2027-03-01T00:00:00Z", time_max="2027-12-01T00:00:00Z") == expected
    )


# ---- writing -----------------------------------------------------------------------------------
def test_written_event_is_read_back_by_icalendar_and_by_ics_busy() -> None:
    text = ics_event(
        uid="01abc-5",
        summary="Sync",
        start="2026-11-23T14:00:00+01:00",
        end="2026-11-23T13:30:00Z",
        stamp=WRITTEN,
    )
    (event,) = icalendar.Calendar.from_ical(text).walk("VEVENT")
    assert isinstance(event, icalendar.Event)
    assert event.start == datetime(2026, 11, 23, 13, 0, tzinfo=UTC)
    assert event.end == datetime(2026, 11, 23, 13, 30, tzinfo=UTC)
    assert ics_busy(text, time_min="2026-11-23T00:00:00Z", time_max="2026-11-24T00:00:00Z") == [
        ["2026-11-23T13:00:00Z", "2026-11-23T13:30:00Z"]
    ]
    assert all(len(line.encode()) <= 75 for line in text.split("\r\n"))


_UNSAFE = "\x00\x01\x08\x0b\x0c\x1b\x1c\x1d\x1e\x7f\x85\u2028\u2029\ufeff"


@given(st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from(_UNSAFE), max_size=120))
def test_any_summary_stays_one_property_and_reads_back(title: str) -> None:
    """No title adds a property, under a strict reader (CRLF) or a lax one that splits on every
    line break Python knows; the title reads back as written, less control characters (which
    RFC 5545 TEXT may not carry) and with icalendar's reading of a literal ``\\N``."""
    text = ics_event(
        uid="u1",
        summary=title,
        start="2026-11-23T13:00:00Z",
        end="2026-11-23T14:00:00Z",
        stamp=WRITTEN,
    )
    unfolded = text.replace("\r\n ", "")
    for lines in (unfolded.split("\r\n"), unfolded.splitlines()):
        names = [line.split(":", 1)[0].split(";", 1)[0] for line in lines if line]
        assert names.count("SUMMARY") == 1 and names.count("DTSTART") == 1
        assert names[0] == "BEGIN" and names[-1] == "END"
    (event,) = icalendar.Calendar.from_ical(text).walk("VEVENT")
    expected = "".join(
        " " if (unicodedata.category(c) == "Cc" and c not in "\t\r\n") or c in _UNSAFE else c
        for c in title
    )
    expected = expected.replace("\r\n", "\n").replace("\r", "\n")
    if "\\N" not in expected:
        assert str(event["SUMMARY"]) == expected


def test_a_meeting_event_names_its_organizer_and_attendees_and_when_it_was_written() -> None:
    """What a calendar client reads of a meeting (RFC 5545 §3.8.4.1/.3, §3.8.7.2): the organizer
    and every attendee as ``mailto:``, the organizer's own participation accepted, the others'
    awaited, duplicates once; DTSTAMP is when the event was written, not its start."""
    people = ["alice@example.com", "bob@example.com", "bob@example.com", "c.d+x@example.org"]
    text = ics_event(
        uid="01abc-5",
        summary="Sync",
        start="2026-11-23T13:00:00Z",
        end="2026-11-23T13:30:00Z",
        stamp=datetime(2026, 11, 20, 10, 15, 7, 999, tzinfo=ZoneInfo("Europe/Berlin")),
        organizer="alice@example.com",
        attendees=people,
    )
    (event,) = icalendar.Calendar.from_ical(text).walk("VEVENT")
    assert isinstance(event, icalendar.Event)
    assert event.uid == "01abc-5"
    stamp = event.DTSTAMP
    assert stamp == datetime(2026, 11, 20, 9, 15, 7, tzinfo=UTC)
    assert event.start == datetime(2026, 11, 23, 13, 0, tzinfo=UTC)
    assert str(event.organizer) == "mailto:alice@example.com"
    attendees = event.attendees
    assert [str(a) for a in attendees] == [
        "mailto:alice@example.com",
        "mailto:bob@example.com",
        "mailto:c.d+x@example.org",
    ]
    assert [a.params["PARTSTAT"] for a in attendees] == ["ACCEPTED", "NEEDS-ACTION", "NEEDS-ACTION"]
    assert {a.params["ROLE"] for a in attendees} == {"REQ-PARTICIPANT"}
    assert "METHOD" not in icalendar.Calendar.from_ical(text)  # a stored object carries none


def test_an_event_without_people_has_no_organizer_or_attendee() -> None:
    text = ics_event(
        uid="u1",
        summary="x",
        start="2026-11-23T13:00:00Z",
        end="2026-11-23T14:00:00Z",
        stamp=WRITTEN,
    )
    (event,) = icalendar.Calendar.from_ical(text).walk("VEVENT")
    assert isinstance(event, icalendar.Event)
    assert "ORGANIZER" not in event and "ATTENDEE" not in event
    stamp = event.DTSTAMP
    assert stamp == WRITTEN


@pytest.mark.parametrize(
    "who",
    [
        "bob@example.com\r\nATTENDEE:mailto:eve@example.com",
        'bob@example.com";RSVP=TRUE',
        "bob@example.com;ROLE=CHAIR",
        "bob@example.com:x",
        "bob",
        "Bob <bob@example.com>",
        "",
    ],
)
def test_an_address_that_is_not_plain_is_refused(who: str) -> None:
    with pytest.raises(BindingError, match="not a plain e-mail address"):
        ics_event(
            uid="u1",
            summary="x",
            start="2026-11-23T13:00:00Z",
            end="2026-11-23T14:00:00Z",
            stamp=WRITTEN,
            attendees=[who],
        )
    with pytest.raises(BindingError, match="organizer"):
        ics_event(
            uid="u1",
            summary="x",
            start="2026-11-23T13:00:00Z",
            end="2026-11-23T14:00:00Z",
            stamp=WRITTEN,
            organizer=who,
        )


def test_a_stamp_without_a_zone_is_refused() -> None:
    with pytest.raises(BindingError, match="stamp"):
        ics_event(
            uid="u1",
            summary="x",
            start="2026-11-23T13:00:00Z",
            end="2026-11-23T14:00:00Z",
            stamp=datetime(2026, 11, 20, 9, 0),
        )
