"""Windows of time a message names: a meeting's window and a visa appointment's dates (Intake LLD,
"Windows"; the conventions of ``tests/data/README.md``, "Meeting windows" and "Visa dates").

``meeting_window`` and ``date_range`` read the days a message names the same way (``_span``: a
date range, a bound such as "before Friday", a date, today / tomorrow, "the next 2 weeks", this or
next week, weekdays, months) and differ only in what a day is: 09:00-18:00 of the person's
working day for a meeting (narrowed by the hours ``lengths.clock`` finds), whole days 00:00-00:00
for an appointment. Days are always the person's own; a zone named in the message ("10am EST",
"London time", "9am their time" with "in Berlin") only says in which zone the clock times are, on
that date. A window never starts before ``local`` and never ends before it starts. Pure:
``local`` (``received_at`` in the person's zone) is the only now.

Why these tools: ``zoneinfo`` for all zone arithmetic (wall-clock days, so DST change days come out
right), compared and returned as UTC instants (Python orders two times of one zone by the wall
clock, fold ignored); the zone a clock time is in comes from ``lengths.zone`` (IANA regions, never
fixed offsets); ``dateutil``'s ``relativedelta`` for "a month later". Dates are found by small
named patterns over the one spelling ``lengths.english`` gives (number words as digits, de/es/fr/pt
day words in English): ``dateparser.parse`` and ``dateutil.parser`` turn a phrase into one instant
while these phrases name ranges ("7-11 Dec", "between Christmas and New Year"), and
``dateparser`` costs 1-3 ms a call against ~0.3 ms for all the readers here together.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from itertools import pairwise

from dateutil.relativedelta import relativedelta

from .lengths import Clock, clock, duration, english, zone

__all__ = ["Span", "date_range", "meeting_window"]

#: the working day, in minutes after midnight
_DAY = (540, 1080)
_ONE_DAY = timedelta(days=1)

_MON = (
    r"(jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
    r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)(?![a-z])\.?"
)
_MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
_ORD = r"(?:st|nd|rd|th)?"
_WD = (
    r"(mon(?:day)?|tue(?:s(?:day)?)?|wed(?:nesday|s)?|thu(?:r(?:s(?:day)?)?)?|fri(?:day)?"
    r"|sat(?:urday)?|sun(?:day)?)\b"
)
_WEEKDAYS = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
_HOLIDAYS = {"christmas eve": (24, 12), "christmas": (25, 12), "xmas": (25, 12)}
_HOLIDAYS |= {"boxing day": (26, 12), "new year's eve": (31, 12), "new year": (1, 1)}


@dataclass(frozen=True)
class _Mention:
    """A date as written: day, month and year when said; ``form``: dm, md, dot, nth, holiday."""

    start: int
    end: int
    day: int
    month: int | None
    year: int | None
    form: str


@dataclass(frozen=True)
class Span:
    """Days a message names, in the person's calendar. ``kind``: ``days``, ``today``, ``week``
    (to its Sunday), ``before`` (from now), ``rolling`` (from now for ``delta``), ``month``,
    ``after`` (no last day) or ``invalid`` (a date that does not exist: ask)."""

    first: date
    last: date | None
    words: str
    kind: str = "days"
    delta: relativedelta | None = None


_DATES = [
    (re.compile(rf"\b(\d{{1,2}}){_ORD}\s+(?:of\s+)?{_MON}(?:,?\s+(\d{{4}}))?"), "dm"),
    (re.compile(rf"\b{_MON}\s+(?:the\s+)?(\d{{1,2}}){_ORD}(?![\d:])(?:,?\s+(\d{{4}}))?"), "md"),
    (re.compile(r"\b(\d{1,2})\.(\d{1,2})\.(\d{4})?"), "dot"),
    (re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b"), "iso"),
    (
        re.compile(r"\b(?:on|from|to|until|till|before|after|by|between|and)\s+(the\s+(\d{1,2})"
                   r"(?:st|nd|rd|th))\b(?!\s+(?:of\s+)?" + _MON + ")"),
        "nth",
    ),
    (
        re.compile(r"\b(christmas\s+eve|christmas|xmas|boxing\s+day|new\s+year'?s\s+eve"
                   r"|new\s+year)(?:'?s)?(?:\s+day)?\b"),
        "holiday",
    ),
]  # fmt: skip


def _mention(m: re.Match[str], form: str) -> _Mention:
    g = m.groups()
    if form == "holiday":
        key = re.sub(r"\s+", " ", g[0]).replace("years", "year's").replace("year s", "year's")
        day, month = _HOLIDAYS.get(key, _HOLIDAYS["new year's eve"] if "eve" in key else (1, 1))
        return _Mention(m.start(), m.end(), day, month, None, form)
    if form in {"md", "iso"}:
        g = (g[1], g[0], g[2]) if form == "md" else (g[2], g[1], g[0])
    if form == "nth":
        return _Mention(m.start(1), m.end(), int(g[1]), None, None, form)
    month = int(g[1]) if form in {"dot", "iso"} else _MONTHS.index(str(g[1])[:3]) + 1
    year = None if g[2] is None else int(g[2]) + (2000 if len(g[2]) == 2 else 0)
    return _Mention(m.start(), m.end(), int(g[0]), month, year, form)


def _mentions(low: str) -> list[_Mention]:
    """Every date written in ``low``, in order, none overlapping another."""
    found = sorted(
        (_mention(m, form) for pattern, form in _DATES for m in pattern.finditer(low)),
        key=lambda x: (x.start, -x.end),
    )
    kept: list[_Mention] = []
    for x in found:
        if not kept or x.start >= kept[-1].end:
            kept.append(x)
    return kept


def _resolve(day: int, month: int | None, year: int | None, today: date) -> date | None:
    """The date meant: with a year, that one; without, the first not before ``today`` (29
    February: the next leap year); without a month, the next such day of a month."""
    if month is None:
        y, mo = today.year, today.month
        for _ in range(13):
            try:
                d = date(y, mo, day)
            except ValueError:
                d = None
            if d is not None and d >= today:
                return d
            y, mo = (y + 1, 1) if mo == 12 else (y, mo + 1)
        return None
    for y in [year] if year else range(today.year, today.year + 9):
        try:
            d = date(y, month, day)
        except ValueError:
            continue
        if year or d >= today:
            return d
    return None


def _on_or_before(x: _Mention, last: date) -> date | None:
    """``x``'s date on or before ``last``: in its year when said, else the latest such day."""
    month = x.month or last.month
    for y in [x.year] if x.year else [last.year, last.year - 1]:
        try:
            d = date(y, month, x.day)
        except ValueError:
            continue
        if x.year or d <= last:
            return d
    if x.month is None and x.day > last.day:  # "from the 28th to the 3rd"
        before = last.replace(day=1) - _ONE_DAY
        return _on_or_before(replace(x, month=before.month, year=before.year), before)
    return None


def _pair(a: _Mention, b: _Mention, today: date, words: str, between: bool) -> Span:
    """Two dates as a span: a month or year said once applies to both; the last day is the
    first not before today and the first day the latest before it ("28 Dec to 3 Jan")."""
    a = replace(a, month=a.month or b.month, year=a.year or b.year)
    b = replace(b, month=b.month or a.month, year=b.year or a.year)
    last = _resolve(b.day, b.month, b.year, today)
    first = None if last is None else _on_or_before(a, last)
    if first is None or last is None or first > last:
        return Span(today, today, words, "invalid")
    if between and "holiday" in (a.form, b.form):  # "between Christmas and New Year"
        first, last = first + _ONE_DAY, last - _ONE_DAY
    return Span(first, last, words)


_JOIN = re.compile(r"\s*(-|to|and|or|until|till|through|thru)\s*(?:the\s+)?")
_PRE = re.compile(rf"(?:\b(between|from)\s+)?\b(\d{{1,2}}){_ORD}\s*(-|to|and|or|until|till)\s*$")
_POST = re.compile(rf"\s*(?:-|to|until|till|through)\s*(\d{{1,2}}){_ORD}(?![\d:])")


def _date_range(low: str, today: date) -> Span | None:
    """Two dates as one span: "between 1 and 15 December", "7-11 Dec", "Jan 5-20", "from the
    14th to the 18th", "10.12. to 20.12.", "2026-12-10 to 2026-12-20", "Dec 3 or Dec 4",
    "between Christmas and New Year"."""
    found = _mentions(low)
    for a, b in pairwise(found):
        join = _JOIN.fullmatch(low, a.end, b.start)
        said_between = re.search(r"\bbetween\s+$", low[: a.start]) is not None
        if join and (join.group(1) != "and" or said_between):
            return _pair(a, b, today, low[a.start : b.end], join.group(1) == "and")
    for x in found:
        pre = _PRE.search(low, 0, x.start) if x.form == "dm" else None
        if pre and (pre.group(3) != "and" or pre.group(1) == "between"):
            a = _Mention(pre.start(2), pre.end(2), int(pre.group(2)), None, None, "dm")
            return _pair(a, x, today, low[pre.start() : x.end], False)
        post = _POST.match(low, x.end) if x.form == "md" else None
        if post:
            b = _Mention(post.start(1), post.end(), int(post.group(1)), None, None, "md")
            return _pair(x, b, today, low[x.start : post.end()], False)
    return None


def _weekday(word: str, today: date, monday: date | None = None) -> date:
    """The first such weekday after today ("Monday" said on a Monday is next week's), or that
    day of the week starting ``monday`` ("Tuesday next week")."""
    index = _WEEKDAYS.index(word[:3])
    if monday is not None:
        return monday + timedelta(days=index)
    return today + timedelta(days=(index - today.weekday()) % 7 or 7)


_BOUND = re.compile(r"\b(before|until|till|by|through|after|from)\s+")
_WD_AT = re.compile(r"(?:next\s+|this\s+)?" + _WD)


def _bound(low: str, today: date) -> Span | None:
    """ "before Friday" (from now to Thursday), "before 20 Dec", "until the 5th" (to that day),
    "after 10 Dec" (from 11 Dec, no end), "from 1 March" (from that day, no end)."""
    starts = {x.start: x for x in _mentions(low)}
    for m in _BOUND.finditer(low):
        x = starts.get(m.end())
        wd = _WD_AT.match(low, m.end())
        if x is not None:
            said = low[m.start() : x.end]
            after = today + (_ONE_DAY if m.group(1) in {"before", "after"} else timedelta(0))
            day = _resolve(x.day, x.month, x.year, after)
        elif wd is not None:
            said, day = low[m.start() : wd.end()], _weekday(wd.group(1), today)
        else:
            continue
        if day is None:
            return Span(today, today, said, "invalid")
        if m.group(1) in {"after", "from"}:
            return Span(
                day + (_ONE_DAY if m.group(1) == "after" else timedelta(0)), None, said, "after"
            )
        last = day - _ONE_DAY if m.group(1) == "before" else day
        return Span(today, max(last, today), said, "before")
    return None


def _single_date(low: str, today: date) -> Span | None:
    found = _mentions(low)
    if not found:
        return None
    x = found[0]
    day = _resolve(x.day, x.month, x.year, today)
    words = low[x.start : x.end]
    return Span(today, today, words, "invalid") if day is None else Span(day, day, words)


_RELATIVE = re.compile(
    r"\b(?:(today|tonight|this\s+(?:morning|afternoon|evening))|(day\s+after\s+tomorrow|"
    r"tomorrow|tmrw|tmr|tmw|2morrow|tomoz)|in\s+(\d{1,3})\s+days?)\b"
)


def _relative(low: str, today: date) -> Span | None:
    m = _RELATIVE.search(low)
    if not m:
        return None
    if m.group(1):
        return Span(today, today, m.group(0), "today")
    ahead = int(m.group(3)) if m.group(3) else 2 if "after" in m.group(0) else 1
    day = today + timedelta(days=ahead)
    return Span(day, day, m.group(0))


_ROLLING = re.compile(
    r"\b(?:(?:within|in|over|during|for)\s+)?(?:the\s+)?(?:next|coming)\s+(\d+)\s+(day|week|wk"
    r"|month)s?\b|\bwithin\s+(\d+)\s+(day|week|wk|month)s?\b|\b(?:(?:within|in|over|during"
    r"|for)\s+)?the\s+(?:next|coming)\s+(day|week|month)\b"
)


def _rolling(low: str, today: date) -> Span | None:
    """ "within the next 2 weeks", "next 10 days", "over the next week", "the next month":
    from now for that long."""
    m = _ROLLING.search(low)
    if not m:
        return None
    n, unit = next((n, u) for n, u in ((m[1], m[2]), (m[3], m[4]), ("1", m[5])) if u)
    count = int(n)
    delta = (
        relativedelta(months=count)
        if unit == "month"
        else relativedelta(days=count * (1 if unit == "day" else 7))
    )
    return Span(today, None, m.group(0), "rolling", delta)


def _weeks(low: str, today: date) -> Span | None:
    """ "this week" (from now to Sunday), "next week" (the next ISO week, Monday to Sunday)."""
    m = re.search(r"\b(this|next)\s+(?:wk|week)\b", low)
    if not m:
        return None
    monday = today - timedelta(days=today.weekday())
    if m.group(1) == "next":
        monday += timedelta(days=7)
    return Span(max(monday, today), monday + timedelta(days=6), m.group(0), "week")


def _weekdays(low: str, today: date) -> Span | None:
    """ "Thursday or Friday" (both days), "next Tuesday", "on fri", "Monday to Wednesday next
    week" ("sat" and "sun" only after "on", "next" or "this")."""
    week = _weeks(low, today)
    monday = None if week is None or week.last is None else week.last - timedelta(days=6)
    in_week = "" if week is None else f" {week.words}"
    m = re.search(rf"\b{_WD}\s*(?:or|and|-|to|through|/)\s*{_WD}", low)
    if m:
        first, last = _weekday(m.group(1), today, monday), _weekday(m.group(2), today, monday)
        return Span(min(first, last), max(first, last), m.group(0) + in_week)
    for m in re.finditer(rf"\b(?:(next|this|on|coming)\s+)?{_WD}", low):
        if m.group(1) or len(m.group(2)) > 3 or m.group(2) not in {"sat", "sun"}:
            day = _weekday(m.group(2), today, monday)
            return Span(day, day, m.group(0) + in_week) if day >= today else None
    return None


_MONTH_SAID = re.compile(
    rf"\b(?:(in|for|during|of|throughout|from)\s+)?(?:(?:early|mid|late|sometime)\s+)?{_MON}"
    rf"(?:\s+(\d{{4}}))?(?:\s*(?:or|and|-|to|through|until|till)\s*{_MON}(?:\s+(\d{{4}}))?)?"
)


def _month_days(month: int, year: int | None, today: date) -> tuple[date, date]:
    """The first and last day of the next such month that has not ended."""
    y = year or (today.year + (1 if month < today.month else 0))
    end = date(y + month // 12, month % 12 + 1, 1) - _ONE_DAY
    return date(y, month, 1), end


def _months(low: str, today: date) -> Span | None:
    """ "in January", "for March", "december appointments", "January or February", "next
    month" (the calendar month), "this month". Short names and "may" need a word before them."""
    m = re.search(r"\b(next|this)\s+month\b", low)
    if m:
        start = today.replace(day=1)
        if m.group(1) == "next":
            start = (start + timedelta(days=32)).replace(day=1)
        first, last = _month_days(start.month, start.year, today)
        return Span(max(first, today), last, m.group(0), "month")
    for m in _MONTH_SAID.finditer(low):
        name, second = m.group(2), m.group(4)
        if not (m.group(1) or second or m.group(3) or len(name) > 4 or name in {"june", "july"}):
            continue
        first, last = _month_days(_MONTHS.index(name[:3]) + 1, _int(m.group(3)), today)
        if second:
            month2 = _MONTHS.index(second[:3]) + 1
            year2 = _int(m.group(5)) or first.year + (1 if month2 < first.month else 0)
            last = _month_days(month2, year2, today)[1]
        return Span(max(first, today), last, m.group(0).strip(), "month")
    return None


def _int(text: str | None) -> int | None:
    return None if text is None else int(text)


#: the readers of days, the most specific first
_READERS = (_date_range, _bound, _single_date, _relative, _rolling, _weekdays, _weeks, _months)


def _span(low: str, today: date) -> Span | None:
    """The days ``low`` (``lengths.english``) names, by the first reader that finds any."""
    for read in _READERS:
        found = read(low, today)
        if found is not None:
            return found
    return None


def _at(day: date, minutes: int, zone: tzinfo | None) -> datetime:
    """The instant (in UTC) ``minutes`` after midnight on ``day`` in ``zone``, by the wall clock:
    on a DST change day 09:00 is 09:00. UTC, because Python orders two times of one zone by
    their wall clock, fold ignored: in a repeated hour 01:45 would come after 01:30 a.m. the
    second time."""
    return (datetime.combine(day, time(0), tzinfo=zone) + timedelta(minutes=minutes)).astimezone(
        UTC
    )


def date_range(text: str, local: datetime) -> tuple[tuple[datetime, datetime | None], str] | None:
    """The appointment dates ``text`` names, as whole days in the person's zone (returned as UTC
    instants), end exclusive: "1-15 December" = 1 Dec 00:00 to 16 Dec 00:00; a month to the next
    month's 1st; "before 20 Dec" and "this week" from ``local``; "within the next 2 weeks" =
    ``local`` + 14 days; "after 10 Dec" = 11 Dec 00:00 with no end (None). Never starts before
    ``local``; None when no date is named or the date does not exist."""
    span = _span(english(text), local.date())
    if span is None or span.kind == "invalid":
        return None
    zone, now = local.tzinfo, local.astimezone(UTC)
    start = max(now, _at(span.first, 0, zone))
    end: datetime | None = None
    if span.delta is not None:
        end = (local + span.delta).astimezone(UTC)
    elif span.last is not None:
        end = _at(span.last + _ONE_DAY, 0, zone)
    if end is not None and end <= start:
        return None
    return (start, end), span.words


def _minutes(hours: Clock | None, length: tuple[int, str] | None) -> tuple[int, int]:
    """A day's window in minutes after midnight: the working day; a range or part as said; a
    clock time with a length exactly that; "before 11" from 09:00; "after 3" or a clock time
    without a length until 18:00 (22:00 in the evening)."""
    if hours is None:
        return _DAY
    if hours.kind == "at" and length is not None:
        return hours.start, hours.start + length[0]
    if hours.end is not None:
        return hours.start, hours.end
    if hours.kind == "before":
        return min(_DAY[0], max(0, hours.start - 60)), hours.start
    t = hours.start
    return t, 1080 if t < 1080 else 1320 if t < 1320 else min(t + 60, 1440)


def _last_day(span: Span, local: datetime) -> date:
    """A span's last meeting day: a week's Friday, a rolling span's last day."""
    if span.delta is not None:
        return (local + span.delta).date()
    if span.kind == "week" and span.last is not None:
        friday = span.last - timedelta(days=2)
        return friday if friday >= span.first else span.last
    return span.last or span.first


def _today_end(local: datetime) -> datetime:
    """ "today": until 18:00, or 22:00 when said after 18:00, or midnight after 22:00."""
    for minutes in (_DAY[1], 1320):
        end = _at(local.date(), minutes, local.tzinfo)
        if end > local.astimezone(UTC):
            return end
    return _at(local.date() + _ONE_DAY, 0, local.tzinfo)


def meeting_window(text: str, local: datetime) -> tuple[tuple[datetime, datetime], str] | None:
    """The window ``text`` allows for a meeting, as aware datetimes (UTC), and the words that
    said it: a day 09:00-18:00 (morning 09-12, lunch 12-14, afternoon 13-18, "after
    3" 15-18, "between 2 and 4" 14-16); a clock time with a length exactly that ("at half past
    two for 20 minutes"); "today" from ``local`` to 18:00 (22:00 after 18:00); "this week" to
    Friday 18:00; "next week" Monday 09:00 to Friday 18:00; "before Friday" to Thursday 18:00;
    "Thursday or Friday" from the first day's start to the last day's end. Clock times are in
    the zone the text names, on the person's day. Never starts before ``local`` nor ends before
    it starts; None when nothing is said, the date does not exist, or the time has passed."""
    low, now = english(text), local.astimezone(UTC)
    span = _span(low, local.date())
    hours = clock(text)
    if (span is None and hours is None) or (span is not None and span.kind in {"invalid", "after"}):
        return None
    named = zone(text) if hours is not None else None
    where = local.tzinfo if named is None else named[0]
    length = duration(text) if hours is not None and hours.kind == "at" else None
    h1, h2 = _minutes(hours, length)
    if span is None:  # a time without a day: today, or tomorrow once it has passed
        key = h1 if hours is not None and hours.kind == "at" else h2
        day = local.date() + (_ONE_DAY if _at(local.date(), key, where) <= now else timedelta())
        span = Span(day, day, "")
    start = max(now, _at(span.first, h1, where))
    end = _at(_last_day(span, local), h2, where)
    if span.kind == "today" and hours is None:
        end = _today_end(local)
    if end <= start:
        return None
    said = [span.words, hours.words if hours and hours.words not in span.words else ""]
    said += [named[1] if named else "", length[1] if length else ""]
    return (start, end), " ".join(w for w in said if w)
