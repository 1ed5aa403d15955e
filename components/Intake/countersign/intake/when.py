"""Windows of time a phrase names, in the caller's zone (Intake LLD, "Windows").

The hours come from a part of day or the working day, moved by "after N"; the days from the first
phrase that matches, tried in a fixed order (``_PHRASES``). Days are computed in the caller's zone,
so month ends and DST changes come out right. Pure: ``local`` (``received_at`` in that zone) is the
only notion of now.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date, datetime, time, timedelta, tzinfo

from dateutil import parser as dateutil_parser

from countersign.kernel import ascii_digits

from .words import MONTHS, NUMBERS, WEEKDAYS, number

__all__ = ["PARTS", "WORK_DAY", "window"]

PARTS = {"morning": (9, 12), "afternoon": (13, 18), "evening": (17, 20)}
WORK_DAY = (9, 18)
_AFTER = re.compile(r"\bafter\s+([0-9]{1,2})(?::([0-9]{2}))?\s*(am|pm)?")

#: a phrase's first day, last day and the words that said it
Days = tuple[date, date, str]


def window(text: str, local: datetime) -> tuple[tuple[datetime, datetime], str] | None:
    """A window of time a phrase names, in the caller's zone (returned as aware datetimes); a
    window that starts today starts no earlier than ``local``."""
    low = text.lower()
    today = local.date()
    part = next((p for p in PARTS if re.search(rf"\b{p}\b", low)), None)
    after = _AFTER.search(low)
    h1, h2 = _hours(part, after)
    for read, with_part, with_after in _PHRASES:
        days = read(low, today)
        if days is None:
            continue
        first, last, words = days
        if with_part and part:
            words += f" {part}"
        if with_after and after:
            words += f" {after.group(0)}"
        start = _at(first, h1, local.tzinfo)
        if first == today and start < local:
            start = local.replace(second=0, microsecond=0)
        return (start, _at(last, h2, local.tzinfo)), words
    return None


def _hours(part: str | None, after: re.Match[str] | None) -> tuple[int, int]:
    """The window's first and last hour: a part of day or the working day; "after N" moves the
    start (a bare hour below 8 is read as pm)."""
    h1, h2 = PARTS[part] if part else WORK_DAY
    if after:
        hour = int(after.group(1))
        if after.group(3) == "pm" or (after.group(3) is None and hour < 8):
            hour += 12
        h1 = min(hour, h2 - 1)
    return h1, h2


def _at(day: date, hour: int, zone: tzinfo | None) -> datetime:
    return datetime.combine(day, time(hour, 0), tzinfo=zone)


def _on_date(low: str, today: date) -> Days | None:
    found = _calendar_date(low, today)
    return None if found is None else (found[0], found[0], found[1])


def _within(low: str, today: date) -> Days | None:
    m = re.search(r"\bwithin\s+(?:the\s+next\s+)?(\w+)\s+(days?|weeks?)\b", low)
    if not m:
        return None
    n = number(m.group(1)) if m.group(1) in NUMBERS or ascii_digits(m.group(1)) else 1
    days = n * (7 if m.group(2).startswith("week") else 1)
    return today, today + timedelta(days=days), m.group(0)


def _tomorrow(low: str, today: date) -> Days | None:
    if not re.search(r"\btomorrow\b", low):
        return None
    d = today + timedelta(days=1)
    return d, d, "tomorrow"


def _today(low: str, today: date) -> Days | None:
    return (today, today, "today") if re.search(r"\btoday\b", low) else None


def _next_week(low: str, today: date) -> Days | None:
    """Monday to Friday of next week."""
    m = re.search(r"\bnext week\b", low)
    if not m:
        return None
    monday = today + timedelta(days=7 - today.weekday())
    return monday, monday + timedelta(days=4), m.group(0)


def _this_week(low: str, today: date) -> Days | None:
    m = re.search(r"\bthis week\b", low)
    if not m:
        return None
    friday = today + timedelta(days=max(0, 4 - today.weekday()))
    return today, friday, m.group(0)


def _weekday(low: str, today: date) -> Days | None:
    """The next such weekday ("next friday" on a Tuesday is the Friday of next week)."""
    m = re.search(r"\b(next|this|on)?\s*(" + "|".join(WEEKDAYS) + r")\b", low)
    if not m:
        return None
    wd = WEEKDAYS.index(m.group(2))
    ahead = (wd - today.weekday()) % 7 or 7
    if m.group(1) == "next" and ahead < 7 and today.weekday() < wd:
        ahead += 7
    d = today + timedelta(days=ahead)
    return d, d, m.group(0).strip()


def _in_month(low: str, today: date) -> Days | None:
    """The next such month, from today on."""
    m = re.search(r"\bin\s+(" + "|".join(MONTHS) + r")\b", low)
    if not m:
        return None
    month = MONTHS.index(m.group(1)) + 1
    year = today.year + (1 if month < today.month else 0)
    first = date(year, month, 1)
    last = (date(year + (month == 12), month % 12 + 1, 1)) - timedelta(days=1)
    return max(today, first), last, m.group(0)


#: the phrases in the order they are tried, and whether the part of day and "after N" are part
#: of the words that said them
_PHRASES: tuple[tuple[Callable[[str, date], Days | None], bool, bool], ...] = (
    (_on_date, True, True),
    (_within, False, False),
    (_tomorrow, True, True),
    (_today, False, False),
    (_next_week, False, False),
    (_this_week, False, False),
    (_weekday, True, False),
    (_in_month, False, False),
)

_MON = r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?"
_ORD = r"(?:st|nd|rd|th)?"
_CALENDAR = re.compile(
    rf"\b(?:on\s+)?(?:the\s+)?(?:[0-9]{{1,2}}{_ORD}(?:\s+of)?\s+{_MON}|{_MON}\s+(?:the\s+)?[0-9]{{1,2}}{_ORD})"
    r"(?:,?\s+(?:[0-9]{4}))?\b"
)
_DAY_OF_MONTH = re.compile(r"\bon\s+the\s+([0-9]{1,2})(?:st|nd|rd|th)\b")


def _calendar_date(low: str, today: date) -> tuple[date, str] | None:
    """A date written as a calendar date ("on 3 December", "Dec 3rd", "the 5th of january 2027",
    "on the 5th"), parsed by dateutil; without a year, the next such day from ``today``."""
    m = _CALENDAR.search(low)
    if m:
        said = m.group(0).strip()
        cleaned = re.sub(r"^(?:on\s+)?(?:the\s+)?|\bof\b|\bthe\b", " ", said)
        try:
            parsed = dateutil_parser.parse(cleaned, default=datetime(today.year, 1, 1)).date()
        except (ValueError, OverflowError):
            return None
        if not re.search(r"[0-9]{4}", said) and parsed < today:
            parsed = parsed.replace(year=parsed.year + 1)
        return parsed, said
    m = _DAY_OF_MONTH.search(low)
    if m:
        day = int(m.group(1))
        year, month = today.year, today.month
        for _ in range(13):  # the next month that has this day, from today on
            try:
                d = date(year, month, day)
            except ValueError:
                d = None
            if d is not None and d >= today:
                return d, m.group(0)
            year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return None
