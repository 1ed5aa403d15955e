"""Pure parts of the sandbox providers: the demo people and their busy time, the banner every
answer carries, and the mailbox page. No I/O, no clock, no randomness: the demo busy time is a
function of (seed, first day) only, so tests and a newcomer's ``countersign up`` see the same
calendars (SPEC §Demo calendars)."""

from __future__ import annotations

import hashlib
import html
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

__all__ = [
    "BANNER",
    "DEMO_PEOPLE",
    "DEMO_SEED",
    "BusyBlock",
    "demo_busy",
    "ics_calendar",
    "ics_stamp",
    "mark_sandbox",
    "render_page",
]

#: the demo people whose calendars the sandbox CalDAV server holds
DEMO_PEOPLE: tuple[str, ...] = (
    "alice@example.com",
    "bob@example.com",
    "carol@example.com",
    "dave@example.com",
)
DEMO_SEED = "countersign-sandbox"

#: what each provider says about itself, in every HTML page and every JSON object answer
BANNER = "Countersign sandbox — not a real {what}. Nothing here reaches a real provider."


@dataclass(frozen=True)
class BusyBlock:
    """One busy interval of a demo person (UTC)."""

    person: str
    uid: str
    start: datetime
    end: datetime
    summary: str = "Busy (sandbox demo)"


def _digest(*parts: str) -> bytes:
    return hashlib.sha256("|".join(parts).encode()).digest()


def demo_busy(
    first_day: date,
    *,
    days: int = 5,
    seed: str = DEMO_SEED,
    people: tuple[str, ...] = DEMO_PEOPLE,
) -> list[BusyBlock]:
    """Busy time of each demo person on the ``days`` weekdays from ``first_day`` on (weekends
    are left free): a morning block (start 09:00–11:00, 1 h) on most days and an afternoon block
    (start 13:00–15:00, 1–2 h) on some. Deterministic in (seed, first_day, people); blocks of one
    person never overlap; sorted by person, then start."""
    out: list[BusyBlock] = []
    for person in people:
        day, made = first_day, 0
        while made < days:
            if day.weekday() < 5:
                h = _digest(seed, person, day.isoformat())
                midnight = datetime.combine(day, time(0, 0), tzinfo=UTC)
                tag = day.strftime("%Y%m%d")
                if h[0] % 4 != 0:  # three days in four
                    start = midnight + timedelta(hours=9 + h[1] % 3)
                    out.append(
                        BusyBlock(person, f"demo-{tag}-am", start, start + timedelta(hours=1))
                    )
                if h[2] % 2 == 0:  # one day in two
                    start = midnight + timedelta(hours=13 + h[3] % 3)
                    hours = 1 + h[4] % 2
                    out.append(
                        BusyBlock(person, f"demo-{tag}-pm", start, start + timedelta(hours=hours))
                    )
                made += 1
            day += timedelta(days=1)
    return out


def ics_stamp(at: datetime) -> str:
    """``20261123T130000Z`` (iCalendar UTC date-time)."""
    return at.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def ics_calendar(uid: str, start: str, end: str, summary: str) -> str:
    """One VEVENT in a VCALENDAR (``start``/``end`` as iCalendar UTC date-times)."""
    return (
        "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//countersign//sandbox//EN\r\nBEGIN:VEVENT\r\n"
        f"UID:{uid}\r\nDTSTAMP:{start}\r\nDTSTART:{start}\r\nDTEND:{end}\r\nSUMMARY:{summary}\r\n"
        "END:VEVENT\r\nEND:VCALENDAR\r\n"
    )


def mark_sandbox(body: Any, what: str) -> Any:
    """A JSON answer with the sandbox label: objects get ``"sandbox": true`` and ``"notice"``
    (never overriding a field of the answer itself); anything else is returned as it is."""
    if isinstance(body, dict):
        out = dict(body)
        out.setdefault("sandbox", True)
        out.setdefault("notice", BANNER.format(what=what))
        return out
    return body


def render_page(title: str, what: str, rows: list[dict[str, str]], columns: list[str]) -> str:
    """A small HTML page: the sandbox header, then ``rows`` as a table (every cell escaped)."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(r.get(c, ''))}</td>" for c in columns) + "</tr>"
        for r in rows
    )
    empty = "" if rows else '<p class="empty">Nothing yet.</p>'
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)} — Countersign sandbox</title>"
        "<style>body{font-family:sans-serif;margin:2em}"
        ".banner{background:#fff3cd;border:1px solid #e0c060;padding:.6em 1em;font-weight:bold}"
        "td,th{border-bottom:1px solid #ddd;padding:.3em .6em;text-align:left;vertical-align:top}"
        "td{white-space:pre-wrap}</style></head><body>"
        f"<header class='banner'>{html.escape(BANNER.format(what=what))}</header>"
        f"<h1>{html.escape(title)}</h1>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{empty}"
        "</body></html>"
    )
