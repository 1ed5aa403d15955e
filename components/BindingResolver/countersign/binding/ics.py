"""iCalendar in and out: busy intervals from a calendar text, and the one event Countersign writes.

Pure (no I/O, no clock). Parsing and recurrence are the ``icalendar`` and
``recurring-ical-events`` libraries' work, not ours: this module only decides what counts as busy
and how a time without a zone is read.

Invariant (GLOBAL_SPEC "Calendars read as written"): every busy interval is the UTC instant of
what the calendar's owner sees — a ``TZID`` time by that zone's rules (with or without a
VTIMEZONE block), a recurring series expanded inside the query window only, with EXDATE and
RECURRENCE-ID overrides applied — and a calendar that cannot be read that way is an error, never
free time.

Errors (both are ``BindingError``, so callers that handle binding failures handle these)::

    BindingError                 binding_error
    └── CalendarError            calendar_unreadable  (not iCalendar; an event without a usable
        │                                              DTSTART; a TZID no rule set is known for)
        └── CalendarWindowError  calendar_window      (a window bound that is not an aware ISO
                                                       8601 time; an endless series and no end)
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import Any, ClassVar, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import icalendar
import recurring_ical_events

from countersign.kernel import BindingError

__all__ = ["CalendarError", "CalendarWindowError", "ics_busy", "ics_event", "is_address"]

#: Wide enough that a floating time or an all-day date read in any zone (offsets lie within
#: ±26 h of UTC) is in the library's candidate set; the exact window is applied afterwards.
_MARGIN = timedelta(days=2)
#: The earliest instant asked of the library when the window has no start.
_EARLIEST = datetime(1, 1, 3, tzinfo=UTC)
_UID = re.compile(r"[A-Za-z0-9._@-]{1,200}")
#: an e-mail address as ORGANIZER/ATTENDEE take it: local@domain, no space, quote, bracket,
#: separator or control character (RFC 5545 CAL-ADDRESS is a URI; these keep it one)
_NAME = re.compile(r"[A-Za-z0-9._@+-]{1,128}")  # a user name (Api: users) as a CN parameter
_MAIL = re.compile(r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}@[A-Za-z0-9.-]{1,253}")
#: Errors the two libraries raise for content they cannot read (their own errors subclass
#: ValueError; a missing DTSTART inside the expansion surfaces as KeyError).
_LIBRARY_ERRORS = (ValueError, KeyError, TypeError, OverflowError)


class CalendarError(BindingError):
    """A calendar text that cannot be read as its owner wrote it; names the event and the
    property. Not retryable: the same text gives the same answer."""

    code: ClassVar[str] = "calendar_unreadable"


class CalendarWindowError(CalendarError):
    """The query window is unusable: a bound without a zone or not ISO 8601, an end before the
    start, or no end while the calendar has a series that never ends."""

    code: ClassVar[str] = "calendar_window"


# ---- reading ----------------------------------------------------------------------------------
def ics_busy(
    text: str,
    *,
    time_min: str | None = None,
    time_max: str | None = None,
    floating_tz: tzinfo = UTC,
) -> list[list[str]]:
    """Busy intervals ``[[start, end], ...]`` (ISO 8601, UTC, sorted) of the events in ``text``.

    ``text`` may hold several VCALENDAR objects one after another (a collection export, the
    calendar-data of a REPORT). An occurrence is busy when it overlaps the half-open window
    ``[time_min, time_max)``; it is reported with its own start and end, not cut to the window.
    Free, as the owner's calendar shows them: ``STATUS:CANCELLED`` (a whole series or one
    occurrence), ``TRANSP:TRANSPARENT`` (Google, Apple and Thunderbird write it for "show as
    free", and by default for all-day events), and events that take no time. An all-day event
    without TRANSP is busy (RFC 5545 §3.8.2.7: OPAQUE is the default).

    Args:
        text: the iCalendar body; empty or blank text has no events.
        time_min: window start, ISO 8601 with a zone; open when None.
        time_max: window end, ISO 8601 with a zone; open when None, which needs every series
            in ``text`` to end (COUNT or UNTIL).
        floating_tz: the owner's zone, for floating times and all-day dates of a VCALENDAR
            that names none (``X-WR-TIMEZONE``, which Google writes, takes precedence).

    Raises:
        CalendarWindowError: the window is unusable (see the class).
        CalendarError: ``text`` is not iCalendar, or one of its events cannot be placed in time.
    """
    lo = _bound(time_min, "time_min")
    hi = _bound(time_max, "time_max")
    if lo is not None and hi is not None and hi < lo:
        raise CalendarWindowError(
            f"read busy times: the window ends before it starts ({time_min} > {time_max})"
        )
    if not text.strip():
        return []
    busy: list[tuple[datetime, datetime]] = []
    for cal in _calendars(text):
        zone = _calendar_zone(cal, floating_tz)
        series = _Series(cal, zone)
        for event in _occurrences(cal, lo, hi):
            if _is_free(event):
                continue
            start, end = series.interval(event)
            if end > start and (hi is None or start < hi) and (lo is None or end > lo):
                busy.append((start, end))
    busy.sort()
    return [[_iso(s), _iso(e)] for s, e in busy]


def _bound(value: str | None, name: str) -> datetime | None:
    if value is None:
        return None
    try:
        dt = datetime.fromisoformat(value)
    except ValueError as e:
        raise CalendarWindowError(
            f"read busy times: {name} {value!r} is not an ISO 8601 date-time"
        ) from e
    if dt.tzinfo is None:
        raise CalendarWindowError(f"read busy times: {name} {value!r} has no time zone")
    return dt.astimezone(UTC)


def _calendars(text: str) -> list[icalendar.Component]:
    try:
        components = icalendar.Calendar.from_ical(text, multiple=True)
    except _LIBRARY_ERRORS as e:
        raise CalendarError(f"read busy times: the answer is not iCalendar ({e})") from e
    for c in components:
        if c.name != "VCALENDAR":
            raise CalendarError(
                f"read busy times: expected VCALENDAR objects, found a top-level {c.name}"
            )
        for event in _events(c):
            _check_event(event)
    return list(components)


def _events(cal: icalendar.Component) -> list[icalendar.Event]:
    """The VEVENTs of ``cal`` (``icalendar`` builds each as an ``Event``)."""
    return [e for e in cal.walk("VEVENT") if isinstance(e, icalendar.Event)]


def _check_event(event: icalendar.Event) -> None:
    """Refuse, by UID, what the libraries would read loosely: a broken property value, no
    DTSTART, or a TZID that neither the calendar's VTIMEZONEs nor the IANA database defines
    (``icalendar`` would quietly read such a time as floating)."""
    uid = str(event.get("UID", "?"))
    for name, problem in event.errors:
        raise CalendarError(f"read busy times: event {uid}: {name} is unreadable ({problem})")
    if "DTSTART" not in event:
        raise CalendarError(f"read busy times: event {uid} has no DTSTART")
    for name in ("DTSTART", "DTEND", "RECURRENCE-ID", "EXDATE", "RDATE"):
        for prop in _as_list(event.get(name)):
            tzid = prop.params.get("TZID")
            values = getattr(prop, "dts", None) or [prop]
            for v in values:
                dt = getattr(v, "dt", None)
                if tzid and isinstance(dt, datetime) and dt.tzinfo is None:
                    raise CalendarError(
                        f"read busy times: event {uid}: {name} names time zone {tzid!r}, "
                        "which neither a VTIMEZONE nor the IANA database defines"
                    )


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def _calendar_zone(cal: icalendar.Component, default: tzinfo) -> tzinfo:
    name = cal.get("X-WR-TIMEZONE")
    if name is None:
        return default
    try:
        return ZoneInfo(str(name))
    except (ZoneInfoNotFoundError, ValueError):
        return default


def _occurrences(
    cal: icalendar.Component, lo: datetime | None, hi: datetime | None
) -> Iterable[icalendar.Event]:
    """The occurrences of every VEVENT that may overlap ``[lo, hi)``, expanded by
    recurring-ical-events (RRULE, RDATE, EXDATE, RECURRENCE-ID) inside the window only."""
    try:
        query = recurring_ical_events.of(cal)
        if hi is None:
            _refuse_endless(cal)
            found = list(query.all())
        else:
            start = lo - _MARGIN if lo is not None else _EARLIEST
            found = list(query.between(start, hi + _MARGIN))
    except _LIBRARY_ERRORS as e:
        raise CalendarError(f"read busy times: cannot expand the calendar's events ({e})") from e
    return [o for o in found if isinstance(o, icalendar.Event)]


def _refuse_endless(cal: icalendar.Component) -> None:
    for event in _events(cal):
        for rule in _as_list(event.get("RRULE")):
            if "COUNT" not in rule and "UNTIL" not in rule:
                raise CalendarWindowError(
                    f"read busy times: event {event.get('UID', '?')} repeats without end; "
                    "give time_max to read it"
                )


class _Series:
    """Where an occurrence lies in UTC.

    An event written out (a one-off, a series' first instance, a RECURRENCE-ID override) is
    read as written: start and end each by its own zone rules. An instance the RRULE/RDATE
    generated lasts the *exact* duration of the series' first instance (RFC 5545 §3.8.5.3), from
    its start read by §3.3.5 (a wall time skipped by a DST change is read with the offset before
    it, one that occurs twice as the first). Adding the wall-clock duration instead — what the
    library hands back — makes a 02:30-03:30 meeting on a spring-forward night last no time at
    all, i.e. free.
    """

    def __init__(self, cal: icalendar.Component, zone: tzinfo) -> None:
        self.zone = zone
        self.exact: dict[str, timedelta] = {}
        self.written: set[tuple[str, datetime]] = set()
        for event in _events(cal):
            uid = str(event.get("UID", ""))
            rid = _value(event.get("RECURRENCE-ID"))
            if rid is not None:
                self.written.add((uid, _instant(rid, zone)))
            elif ("RRULE" in event or "RDATE" in event) and isinstance(event.start, datetime):
                self.exact[uid] = _instant(event.end, zone) - _instant(event.start, zone)

    def interval(self, occurrence: icalendar.Event) -> tuple[datetime, datetime]:
        start = _instant(occurrence.start, self.zone)
        uid = str(occurrence.get("UID", ""))
        rid = _value(occurrence.get("RECURRENCE-ID"))
        generated = rid is not None and (uid, _instant(rid, self.zone)) not in self.written
        if generated and uid in self.exact and isinstance(occurrence.start, datetime):
            return start, start + self.exact[uid]
        return start, _instant(occurrence.end, self.zone)


def _value(prop: object) -> date | None:
    """The date or date-time of a DTSTART-like property (None when absent)."""
    dt = getattr(prop, "dt", None)
    return dt if isinstance(dt, date) else None


def _is_free(event: icalendar.Event) -> bool:
    status = str(event.get("STATUS", "")).upper()
    transp = str(event.get("TRANSP", "OPAQUE")).upper()
    return status == "CANCELLED" or transp == "TRANSPARENT"


def _instant(value: date, zone: tzinfo) -> datetime:
    """The UTC instant of a DTSTART/DTEND value (``icalendar``'s ``Event.end`` comes from DTEND,
    DURATION, or RFC 5545's defaults: a date lasts a day, a date-time no time); a floating time
    or a date is read in ``zone``."""
    if isinstance(value, datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=zone)
    else:
        aware = datetime.combine(value, time(), zone)
    return aware.astimezone(UTC)


def _iso(dt: datetime) -> str:
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---- writing ----------------------------------------------------------------------------------
def _utc(value: str, name: str) -> datetime:
    try:
        dt = datetime.fromisoformat(value)
    except ValueError as e:
        raise BindingError(f"event {name}: not an ISO 8601 date-time: {value!r}") from e
    if dt.tzinfo is None:
        raise BindingError(f"event {name}: date-time needs a time zone: {value!r}")
    return dt.astimezone(UTC)


def _text(value: str) -> str:
    """RFC 5545 §3.3.11 TEXT may carry no control character but HTAB (line breaks are escaped
    by ``icalendar``); those, and the separators that lax readers split lines on (U+0085,
    U+2028, U+2029), become spaces so that no reader sees a second property; so does U+FEFF (a
    byte-order mark, which ``icalendar`` drops when it opens a value)."""
    return "".join(
        " "
        if (unicodedata.category(c) == "Cc" and c not in "\t\r\n") or c in "\x85\u2028\u2029\ufeff"
        else c
        for c in value
    )


def ics_event(
    *,
    uid: str,
    summary: str,
    start: str,
    end: str,
    stamp: datetime,
    organizer: str | None = None,
    organizer_name: str | None = None,
    attendees: Sequence[str] = (),
    method: Literal["REQUEST"] | None = None,
) -> str:
    """A one-event VCALENDAR in UTC, written by ``icalendar`` (escaping, 75-octet folding, CRLF).

    What RFC 5545 and a calendar client expect of a meeting: ``uid`` is the meeting's (the same
    in every attendee's calendar), ``DTSTAMP`` is ``stamp`` — when the event is written, passed in
    by the runtime that writes it (this module reads no clock) — ``ORGANIZER`` is
    ``mailto:<organizer>`` (with ``CN=<organizer_name>`` when given and made of
    ``[A-Za-z0-9._@+-]``, else without) and each of ``attendees`` (duplicates dropped, order kept) is an
    ``ATTENDEE`` (``ROLE=REQ-PARTICIPANT``; ``PARTSTAT=ACCEPTED`` for the organizer, who asked
    for the meeting, ``NEEDS-ACTION`` for the others). No ``METHOD`` unless ``method`` is given:
    a stored calendar object may not carry one (RFC 4791 §4.1); an invitation sent by mail
    (iMIP, RFC 6047) carries ``METHOD:REQUEST`` (RFC 5546 §3.2.2) — the same event otherwise.

    Raises:
        BindingError: the UID has characters outside ``[A-Za-z0-9._@-]``, a time is not an
            aware ISO 8601 date-time (``stamp`` included), or an address is not a plain e-mail
            address.
    """
    if not _UID.fullmatch(uid):
        raise BindingError(f"event uid {uid!r} has characters outside [A-Za-z0-9._@-]")
    if method not in (None, "REQUEST"):
        raise BindingError(f"event method {method!r}: only REQUEST is written")
    if stamp.tzinfo is None:
        raise BindingError("event stamp: date-time needs a time zone")
    event = icalendar.Event()
    event.add("UID", uid)
    event.add("DTSTAMP", stamp.astimezone(UTC).replace(microsecond=0))
    event.add("DTSTART", _utc(start, "start"))
    event.add("DTEND", _utc(end, "end"))
    event.add("SUMMARY", _text(summary))
    if organizer is not None:
        chair = _address(organizer, "organizer")
        if organizer_name is not None and _NAME.fullmatch(organizer_name):
            chair.params["CN"] = organizer_name
        event.add("ORGANIZER", chair)
    for who in dict.fromkeys(attendees):
        address = _address(who, "attendee")
        address.params["ROLE"] = "REQ-PARTICIPANT"
        address.params["PARTSTAT"] = "ACCEPTED" if who == organizer else "NEEDS-ACTION"
        event.add("ATTENDEE", address)
    cal = icalendar.Calendar()
    cal.add("VERSION", "2.0")
    cal.add("PRODID", "-//Countersign//EN")
    if method is not None:
        cal.add("METHOD", method)
    cal.add_component(event)
    return bytes(cal.to_ical(sorted=False)).decode("utf-8")


def is_address(value: object) -> bool:
    """Whether ``value`` is an e-mail address ``ics_event`` takes as ORGANIZER or ATTENDEE."""
    return isinstance(value, str) and _MAIL.fullmatch(value) is not None


def _address(value: str, name: str) -> icalendar.vCalAddress:
    """``mailto:<value>`` for a plain e-mail address (nothing a reader could take for another
    parameter, property or URI part)."""
    if not _MAIL.fullmatch(value):
        raise BindingError(f"event {name} {value!r} is not a plain e-mail address")
    return icalendar.vCalAddress(f"mailto:{value}")
