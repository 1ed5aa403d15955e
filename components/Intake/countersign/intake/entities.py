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
from importlib import import_module
from types import ModuleType
from typing import Any

from countersign.kernel import format_utc

from .lengths import duration, lifetime, max_polls, poll_interval
from .models import Contact, Need
from .people import EMAIL, people
from .purchase import budget, quantity, query
from .titles import title
from .when import date_range, meeting_window
from .words import NUMBERS

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
        found: Got = people(text, contacts, me)
        return found
    if name == "max_price":
        return budget(text, currency or "EUR", asked=asked)
    reader = _READERS.get((kind, name))
    return reader(text) if reader else None


def _moment(name: str, text: str, local: datetime) -> Got:
    """A meeting window's start or end (``window_start`` / ``window_end``: ``when.meeting_window``)
    or a visa appointment's first or last day (``date_from`` / ``date_to``: ``when.date_range``;
    an open end, "after 10 Dec", leaves ``date_to`` to ask), in UTC."""
    if name in {"date_from", "date_to"}:
        dates = date_range(text, local)
        if dates is None:
            return None
        (first, last), words = dates
        value = first if name == "date_from" else last
        return None if value is None else (format_utc(value), words)
    found = meeting_window(text, local)
    if found is None:
        return None
    (start, end), words = found
    return (format_utc(start if name == "window_start" else end), words)


def _notify(text: str) -> Got:
    """Where a receipt or confirmation goes: the address after "to" / "at" / "me:", or after
    "mail" / "email" / "send it to" ("mail anna@example.de when you find one")."""
    m = re.search(
        r"\b(?:to|at|me:|e-?mail|mail|send\s+it\s+to|notify|cc)\s*:?\s+(" + EMAIL.pattern + ")",
        text,
        re.I,
    )
    return (m.group(1), m.group(0)) if m else None


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


def _hold(text: str) -> Got:
    """Whether to hold a slot found: "hold it", "and hold any slot", a bare "hold" → True;
    "don't hold anything", "no need to hold" → False; "hold on" / "on hold" are neither."""
    low = text.lower()
    m = re.search(r"\b(?:don'?t|do not|no need to|never|without)\s+(?:hold|reserve)\w*\b", low)
    if m:
        return (False, m.group(0))
    m = re.search(
        r"(?<!\bon )\b(?:hold|reserve)\b(?!\s+on\b)(?:\s+(?:it|one|them|any \w+|a \w+))?", low
    )
    return (True, m.group(0)) if m else None


def _places() -> ModuleType:
    """``places`` (countries and cities, indexed once per process: about a second), imported
    when a consulate is first read or when an Intake is built (``warm``), not on import."""
    return import_module(f"{__package__}.places")


def warm() -> None:
    """Load what reading places needs now, so the first visa message does not pay for it."""
    _places()


def _consulate(text: str) -> Got:
    got: Got = _places().consulate(text)
    return _with_city(got)


def _consulates(text: str) -> Got:
    got: Got = _places().consulates(text)
    if isinstance(got, tuple):
        for cid in got[0]:
            if _places().describe(cid)[1] is None:
                return _city_question("consulates", cid)
    return got


def _with_city(got: Got) -> Got:
    """A consulate named by its country alone asks which city's (the country × city is the
    consulate)."""
    if isinstance(got, tuple) and _places().describe(got[0])[1] is None:
        return _city_question("consulate", got[0])
    return got


def _city_question(entity: str, cid: str) -> Need:
    country = _places().describe(cid)[0]
    return Need(
        entity, f"Which city's {country} consulate do you mean?", heard={"country": country}
    )


#: the reader of each (type, name) the registry declares, besides date-times, e-mail addresses
#: and participants (which ``extract`` reads itself)
_READERS: dict[tuple[str, str], Callable[[str], Got]] = {
    ("list", "consulates"): _consulates,
    ("integer", "duration_min"): duration,
    ("integer", "poll_interval_s"): poll_interval,
    ("integer", "max_polls"): max_polls,
    ("integer", "max_lifetime_s"): lifetime,
    ("integer", "quantity"): quantity,
    ("string", "title"): title,
    ("string", "query"): query,
    ("string", "consulate"): _consulate,
    ("boolean", "hold"): _hold,
}
