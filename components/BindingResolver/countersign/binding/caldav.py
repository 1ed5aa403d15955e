"""CalDAV asked for a window: the ``calendar-query`` REPORT a calendar read sends and the
multistatus it gets back (RFC 4791 §7.8, §9.9; RFC 4918 §13).

Pure (no I/O, no clock). The server is asked only for the events that may touch the window, and
``ics.ics_busy`` still decides what is busy in exactly that window: the server's filter is widened
by ``ics._MARGIN`` on both sides (a floating time or an all-day date is placed by the owner's
zone, which a server may read differently), so it only saves work and never decides an answer.
Recurring series whose instances fall in the window are returned whole by the server (RFC 4791
§9.9: a component matches when any instance overlaps) and expanded locally, in the window only.

The multistatus is read with the standard library's XML parser; a document with a DOCTYPE (the
way to entity expansion) is refused before parsing. Anything that is not a readable multistatus
of calendar objects is ``CalendarError`` — never free time.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from .ics import _MARGIN, CalendarError, CalendarWindowError, ics_busy

__all__ = [
    "CALDAV_QUERY",
    "caldav_busy",
    "caldav_query",
    "is_multistatus",
    "read_multistatus",
]

#: the formatter name a registry op's REPORT body uses (``fn: caldav_query``)
CALDAV_QUERY: Final = "caldav_query"
_DAV: Final = "{DAV:}"
_CAL: Final = "{urn:ietf:params:xml:ns:caldav}"
_OK: Final = "200"


def _utc_text(value: str | None, name: str, shift: timedelta) -> str | None:
    """``value`` (aware ISO 8601) moved by ``shift``, as a CalDAV UTC time (``YYYYMMDDTHHMMSSZ``),
    rounded outward to the second."""
    if value is None:
        return None
    try:
        dt = datetime.fromisoformat(value)
    except ValueError as e:
        raise CalendarWindowError(
            f"ask for busy times: {name} {value!r} is not an ISO 8601 date-time"
        ) from e
    if dt.tzinfo is None:
        raise CalendarWindowError(f"ask for busy times: {name} {value!r} has no time zone")
    t = dt.astimezone(UTC) + shift
    whole = math.floor(t.timestamp()) if shift < timedelta(0) else math.ceil(t.timestamp())
    return datetime.fromtimestamp(whole, UTC).strftime("%Y%m%dT%H%M%SZ")


def caldav_query(time_min: str | None, time_max: str | None, *, data: bool = True) -> str:
    """The ``calendar-query`` REPORT body for the events that may touch ``[time_min, time_max)``
    (each bound widened by the margin; an open bound is left out; no bound: every event).

    ``data``: ask for each event's ``calendar-data`` and ``getetag`` (a read), or the ``getetag``
    alone (the revalidation of a read: what is in the window, and which version).

    Raises:
        CalendarWindowError: a bound is not an aware ISO 8601 date-time, or the end is before
            the start.
    """
    start = _utc_text(time_min, "time_min", -_MARGIN)
    end = _utc_text(time_max, "time_max", _MARGIN)
    if start is not None and end is not None and end < start:
        raise CalendarWindowError(
            f"ask for busy times: the window ends before it starts ({time_min} > {time_max})"
        )
    attrs = "".join(f' {k}="{v}"' for k, v in (("start", start), ("end", end)) if v is not None)
    window = f"<C:time-range{attrs}/>" if attrs else ""
    wanted = "<D:getetag/><C:calendar-data/>" if data else "<D:getetag/>"
    return (
        '<?xml version="1.0" encoding="utf-8"?>'
        '<C:calendar-query xmlns:D="DAV:" xmlns:C="urn:ietf:params:xml:ns:caldav">'
        f"<D:prop>{wanted}</D:prop>"
        '<C:filter><C:comp-filter name="VCALENDAR"><C:comp-filter name="VEVENT">'
        f"{window}</C:comp-filter></C:comp-filter></C:filter></C:calendar-query>"
    )


def is_multistatus(text: str) -> bool:
    """Whether an answer is XML (a multistatus) rather than iCalendar text."""
    return text.lstrip("\ufeff \t\r\n").startswith("<")


def _parse(text: str) -> ET.Element:
    if "<!DOCTYPE" in text or "<!ENTITY" in text:
        raise CalendarError("read busy times: the multistatus carries a DOCTYPE; refused")
    try:
        root = ET.fromstring(text)  # noqa: S314 - no DOCTYPE, so no entity is declared
    except ET.ParseError as e:
        raise CalendarError(f"read busy times: the answer is not XML ({e})") from e
    if root.tag != f"{_DAV}multistatus":
        raise CalendarError(f"read busy times: expected a DAV multistatus, found {root.tag!r}")
    return root


def _status_code(status: str | None) -> str:
    """``HTTP/1.1 200 OK`` → ``200``."""
    parts = (status or "").split()
    return parts[1] if len(parts) > 1 else ""


def _ok_props(response: ET.Element, href: str) -> ET.Element:
    """The ``prop`` of the response's 200 propstat; an error response or a property the server
    could not give is ``CalendarError`` (what cannot be read is never free)."""
    code = _status_code(response.findtext(f"{_DAV}status"))
    if code and code != _OK:
        raise CalendarError(f"read busy times: the server answered {code} for {href}")
    found: ET.Element | None = None
    for propstat in response.findall(f"{_DAV}propstat"):
        code = _status_code(propstat.findtext(f"{_DAV}status"))
        prop = propstat.find(f"{_DAV}prop")
        if code != _OK and prop is not None and len(prop):
            names = ", ".join(sorted(p.tag for p in prop))
            raise CalendarError(f"read busy times: {href}: {names} answered {code or '?'}")
        if code == _OK and prop is not None:
            found = prop
    if found is None:
        raise CalendarError(f"read busy times: {href} has no readable properties")
    return found


def read_multistatus(text: str, *, data: bool = True) -> tuple[str, dict[str, str]]:
    """The calendar objects of a ``calendar-query`` answer (their texts one after another) and
    each one's version (``href → getetag``).

    ``data``: every response must carry ``calendar-data`` (False: the revalidation's answer,
    ``getetag`` only).

    Raises:
        CalendarError: not a multistatus, a response in error, a response without its etag (or
            its calendar data), or one href twice.
    """
    texts: list[str] = []
    versions: dict[str, str] = {}
    for response in _parse(text).findall(f"{_DAV}response"):
        href = (response.findtext(f"{_DAV}href") or "").strip()
        if not href:
            raise CalendarError("read busy times: a multistatus response has no href")
        if href in versions:
            raise CalendarError(f"read busy times: {href} is answered twice")
        prop = _ok_props(response, href)
        etag = (prop.findtext(f"{_DAV}getetag") or "").strip()
        if not etag:
            raise CalendarError(f"read busy times: {href} has no etag")
        versions[href] = etag
        if data:
            body = prop.findtext(f"{_CAL}calendar-data")
            if body is None or not body.strip():
                raise CalendarError(f"read busy times: {href} has no calendar data")
            texts.append(body if body.endswith("\n") else body + "\r\n")
    return "".join(texts), dict(sorted(versions.items()))


def caldav_busy(
    text: str, status: Any, *, time_min: str | None, time_max: str | None
) -> dict[str, Any]:
    """The normalized output of a calendar read answered by a multistatus: the busy intervals
    (``ics_busy`` over the returned objects, exactly the window) and ``versions`` (href → etag of
    each object the server returned for the window), which the execute-time re-check compares
    with one etag-only query."""
    calendars, versions = read_multistatus(text)
    return {
        "status": status,
        "busy": ics_busy(calendars, time_min=time_min, time_max=time_max),
        "versions": versions,
    }
