"""Entities by the type and name the registry declares, each with the words that gave it (Intake
SPEC, "Entities by declared type"): people through the caller's contacts, durations, windows of
time, how often and how long a watcher checks, amounts, quantities, places and free text.

``extract`` picks one reader per (type, name) from a table; a reader returns the value and its
words, a ``Need`` when the text is ambiguous (two contacts with one first name), or None. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from countersign.kernel import ascii_digits, format_utc

from .models import Contact, Need
from .people import EMAIL, people
from .purchase import budget, quantity, query
from .titles import title
from .when import PARTS, window
from .words import MONTHS, NUMBERS, STOP, WEEKDAYS, number

__all__ = ["Got", "extract"]

#: a value and the words that gave it, a question to ask, or nothing found
Got = tuple[Any, str] | Need | None

#: verbs of buying, misspellings of "purchase" included
_BUY = r"(?:buy|order|get|purchase|purchse|purchace|purhcase)"
_NUMBER = "([0-9]+|" + "|".join(NUMBERS) + ")"


def extract(
    name: str,
    kind: str,
    text: str,
    local: datetime,
    contacts: Sequence[Contact],
    me: Contact | None = None,
    *,
    currency: str | None = None,
    asked: bool = False,
) -> Got:
    """The entity ``name`` of type ``kind`` in ``text`` (``local``: ``received_at`` in the
    caller's zone, for windows of time; ``me``: the person asking, an attendee; ``currency``: an
    amount's declared currency; ``asked``: the text answers the question for this entity, so a
    bare number is its value)."""
    if kind == "datetime":
        return _moment(name, text, local)
    if kind == "email":
        return _notify(text) if name.startswith("notify") else None
    if (kind, name) == ("list", "participants"):
        return people(text, contacts, me)
    if name == "max_price":
        return budget(text, currency or "EUR", asked=asked)
    reader = _READERS.get((kind, name))
    return reader(text) if reader else None


def _moment(name: str, text: str, local: datetime) -> Got:
    """A window's start (``window_start``, ``date_from``) or end (any other name), in UTC."""
    found = window(text, local)
    if found is None:
        return None
    (start, end), words = found
    value = start if name in {"window_start", "date_from"} else end
    return (format_utc(value), words)


def _notify(text: str) -> Got:
    """Where a receipt or confirmation goes: the address after "to" / "at" / "me:", or after
    "mail" / "email" / "send it to" ("mail anna@example.de when you find one")."""
    m = re.search(
        r"\b(?:to|at|me:|e-?mail|mail|send\s+it\s+to|notify|cc)\s*:?\s+(" + EMAIL.pattern + ")",
        text,
        re.I,
    )
    return (m.group(1), m.group(0)) if m else None


def _duration(text: str) -> Got:
    """Minutes: "half an hour", "1h15", "two hours", "1.5 h", "45 minutes"."""
    low = text.lower()
    m = re.search(r"\bhalf an hour\b", low)
    if m:
        return (30, m.group(0))
    m = re.search(r"\b([0-9]+)\s*h(?:ours?)?\s*([0-9]+)\s*(?:m|min|minutes?)?\b", low)
    if m:
        return (int(m.group(1)) * 60 + int(m.group(2)), m.group(0))
    m = re.search(r"\b(an|one|two|three|[0-9]+(?:\.5)?)\s*(?:-\s*)?(hours?|h)\b", low)
    if m:
        n = m.group(1)
        hours = float(n) if ascii_digits(n[0]) else float(NUMBERS[n])
        return (int(hours * 60), m.group(0))
    m = re.search(r"\b" + _NUMBER + r"\s*(?:-\s*)?(?:minutes?|mins?|m)\b", low)
    if m:
        return (number(m.group(1)), m.group(0))
    return None


_UNIT_S = {
    "second": 1,
    "sec": 1,
    "minute": 60,
    "min": 60,
    "hour": 3600,
    "day": 86400,
    "week": 604800,
}
_EVERY_WORD = {"hourly": 3600, "daily": 86400, "every hour": 3600, "every day": 86400}


def _every(text: str) -> Got:
    """How often to check: "every 2 seconds", "every 10 minutes", "hourly", "every day"."""
    low = text.lower()
    m = re.search(
        r"\bevery\s+" + _NUMBER + r"\s+(seconds?|secs?|minutes?|mins?|hours?|days?)\b", low
    )
    if m:
        unit = re.sub(r"s$", "", m.group(2))
        return (number(m.group(1)) * _UNIT_S[unit], m.group(0))
    for words, seconds in _EVERY_WORD.items():
        if re.search(rf"\b{words}\b", low):
            return (seconds, words)
    return None


def _lifetime(text: str) -> Got:
    """How long to keep checking, in seconds: "for up to 5 days", "within 2 weeks"."""
    m = re.search(
        r"\b(?:for|within)\s+(?:up\s+to\s+|at\s+most\s+)?"
        + _NUMBER
        + r"\s+(hours?|days?|weeks?)\b",
        text.lower(),
    )
    return (number(m.group(1)) * _UNIT_S[m.group(2).rstrip("s")], m.group(0)) if m else None


def _hold(text: str) -> Got:
    m = re.search(
        r"\b(?:and\s+)?(?:hold|reserve|keep)\s+(?:it|one|the\s+slot|a\s+slot)\b", text, re.I
    )
    return (True, m.group(0)) if m else None


#: words after "in" / "at" that name no place ("in two weeks", "at least", "in the morning")
_NOT_PLACES = (
    STOP
    | set(MONTHS)
    | set(WEEKDAYS)
    | set(NUMBERS)
    | set(PARTS)
    | {"least", "most", "all", "once", "time", "times", "next", "this", "last", "days", "weeks"}
    | {"hours", "minutes", "day", "week", "month", "months", "year", "noon", "night", "latest"}
)
_PLACE = r"(?:the\s+)?([a-z][a-z-]*)"


def _places(text: str) -> list[tuple[str, str]]:
    """Consulate cities named in ``text``, in order, each with the words that named it: "the
    Lisbon consulate", "in porto", "at Madrid or Rome" (case-insensitive; months, numbers and
    time words after "in" / "at" are not places)."""
    found: list[tuple[int, str, str]] = []
    for m in re.finditer(rf"\b{_PLACE}\s+consulates?\b", text, re.I):
        found.append((m.start(), m.group(1).lower(), m.group(0)))
    for m in re.finditer(rf"\b(?:in|at)\s+{_PLACE}(?:\s+or\s+{_PLACE})?", text, re.I):
        found.append((m.start(1), m.group(1).lower(), m.group(0)))
        if m.group(2):
            found.append((m.start(2), m.group(2).lower(), m.group(0)))
    places: list[tuple[str, str]] = []
    for _, city, words in sorted(found):
        if city not in _NOT_PLACES and city not in {p for p, _ in places}:
            places.append((city, words))
    return places


def _consulate(text: str) -> Got:
    places = _places(text)
    return places[0] if places else None


def _consulates(text: str) -> Got:
    places = _places(text)
    return ([p for p, _ in places], " or ".join(p for p, _ in places)) if places else None


#: the reader of each (type, name) the registry declares, besides date-times, e-mail addresses
#: and participants (which ``extract`` reads itself)
_READERS: dict[tuple[str, str], Callable[[str], Got]] = {
    ("list", "consulates"): _consulates,
    ("integer", "duration_min"): _duration,
    ("integer", "poll_interval_s"): _every,
    ("integer", "max_lifetime_s"): _lifetime,
    ("integer", "quantity"): quantity,
    ("string", "title"): title,
    ("string", "query"): query,
    ("string", "consulate"): _consulate,
    ("boolean", "hold"): _hold,
}
