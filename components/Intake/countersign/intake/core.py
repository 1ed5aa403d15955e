"""Chat text → an intent and its entities, deterministically (no I/O, no wall clock).

Which intent: BM25 (``rank-bm25``) over each registry intent's name, title, description and
examples, after spelling repair against the registry's own vocabulary (``difflib``); below the
threshold it asks which one was meant. Entities by the types the registry declares, each with the
words that gave it: e-mail addresses; people by name through the caller's contacts (an ambiguous
name asks); durations; windows of time resolved in the caller's time zone from ``received_at``;
amounts; quantities; free text (titles, product queries, consulates). Whatever a required entity
still lacks becomes the registry's question (the readiness gate).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from dateutil import parser as dateutil_parser
from rank_bm25 import BM25Okapi

from countersign.kernel import InputError, ascii_digits, format_utc
from countersign.registry import Registry

from .proposer import IntentProposer, ProposalError, catalogue, check_proposal

__all__ = ["Contact", "Explained", "Intake", "Need", "Understanding"]

_WORD = re.compile(r"[a-z0-9@.\-+]+")
_EMAIL = re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b")
_NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "twelve": 12, "fifteen": 15, "twenty": 20,
    "thirty": 30, "forty": 40, "forty-five": 45, "sixty": 60, "ninety": 90,
}  # fmt: skip
#: verbs of buying, misspellings of "purchase" included
#: common words spelling repair leaves alone (close to registry words, but not misspellings)
_COMMON = frozenset(
    [
        "which",
        "where",
        "there",
        "their",
        "these",
        "those",
        "about",
        "would",
        "could",
        "should",
        "please",
        "thanks",
        "think",
        "thing",
        "things",
        "other",
        "under",
        "after",
        "before",
        "since",
        "while",
        "whose",
    ]
)
_BUY = r"(?:buy|order|get|purchase|purchse|purchace|purhcase)"
_WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
_MONTHS = [
    "january", "february", "march", "april", "may", "june", "july", "august", "september",
    "october", "november", "december",
]  # fmt: skip
_STOP = {
    "a",
    "an",
    "the",
    "with",
    "and",
    "for",
    "to",
    "me",
    "my",
    "i",
    "please",
    "of",
    "in",
    "on",
    "at",
    # words that say nothing of which intent is meant (they occur in descriptions too)
    "is", "are", "was", "be", "it", "its", "this", "that", "what", "who", "how", "can", "you",
    "your", "do", "does", "some", "any", "or", "by", "from", "as", "so", "if", "then", "when",
    "one", "we", "us", "our", "let", "lets", "let's", "want", "would", "like", "need",
}  # fmt: skip
_PARTS = {"morning": (9, 12), "afternoon": (13, 18), "evening": (17, 20)}
WORK_DAY = (9, 18)


@dataclass(frozen=True)
class Contact:
    """One of the caller's contacts."""

    name: str
    email: str


@dataclass(frozen=True)
class Explained:
    """Which words gave which entity."""

    entity: str
    value: Any
    words: str


@dataclass(frozen=True)
class Need:
    """What is still missing or unsure, with the question to ask."""

    entity: str
    question: str
    options: list[str] = field(default_factory=list)


@dataclass
class Understanding:
    """What Intake made of a message."""

    intent: str | None
    confidence: float
    candidates: list[tuple[str, float]]
    entities: dict[str, Any]
    explained: list[Explained]
    needs: list[Need]
    #: when no intent fits: what this registry can do (titles)
    can_do: list[str] = field(default_factory=list)
    #: who decided: ``deterministic``, ``model``, or the deterministic fallback and why
    source: str = "deterministic"

    @property
    def ready(self) -> bool:
        """An intent, and nothing required missing."""
        return self.intent is not None and not self.needs


def _tokens(text: str) -> list[str]:
    return [w.rstrip(".") for w in _WORD.findall(text.lower()) if w not in _STOP]


def _stem(word: str) -> str:
    for suffix in ("ing", "es", "s"):
        if len(word) > 4 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


class Intake:
    """Understands chat text against one registry (build once; ``understand`` per message)."""

    def __init__(
        self, registry: Registry, *, threshold: float = 0.5, min_score: float = 1.0
    ) -> None:
        """``threshold``: the Policy's ``intake_threshold`` (0..1) — an intent understood with
        less confidence than this, by the ranking or by a model, is asked about, not planned."""
        if not 0.0 <= threshold <= 1.0:  # NaN fails both comparisons
            raise InputError(
                f"Intake: the confidence threshold must be within 0..1, got {threshold!r}"
            )
        self.registry = registry
        self.threshold = threshold
        #: below this BM25 score nothing in the registry matches: answer with what it can do
        self.min_score = min_score
        self.names = sorted(registry.intents)
        docs = []
        for name in self.names:
            spec = registry.intents[name]
            # the name and title say what the intent is: they count three times
            head = f"{name.replace('_', ' ')} {spec.title} "
            text = " ".join([head * 3, spec.description, *spec.examples])
            docs.append([_stem(t) for t in _tokens(text)])
        self.vocabulary = sorted({t for d in docs for t in d})
        self.bm25 = BM25Okapi(docs)
        #: what a proposer may know of the registry (names, titles, entities; nothing else)
        self.catalogue = catalogue(registry)

    # ---- which intent ---------------------------------------------------------------------------
    def rank(self, text: str) -> list[tuple[str, float]]:
        """Intents by score (best first) and the top one's share of the scores (confidence)."""
        words = []
        for t in _tokens(text):
            s = _stem(t)
            # repair misspellings of the registry's words, never a short or common word into
            # one ("what" is not "watch")
            if s not in self.vocabulary and len(s) > 4 and "@" not in s and s not in _COMMON:
                close = difflib.get_close_matches(s, self.vocabulary, n=1, cutoff=0.8)
                s = close[0] if close else s
            words.append(s)
        scores = self.bm25.get_scores(words)
        return sorted(
            ((n, float(sc)) for n, sc in zip(self.names, scores, strict=True)),
            key=lambda x: -x[1],
        )

    def understand(
        self,
        text: str,
        *,
        received_at: datetime,
        tz: str = "UTC",
        contacts: Sequence[Contact] = (),
        intent: str | None = None,
        known: Mapping[str, Any] | None = None,
        proposer: IntentProposer | None = None,
    ) -> Understanding:
        """Read one message (``intent`` and ``known`` carry what earlier turns settled). With a
        ``proposer`` (a model), its checked proposal decides the intent and seeds the entities;
        an invalid answer is asked again once, then the deterministic path answers."""
        follow_up = intent is not None  # an earlier turn settled the intent and asked
        ranked = self.rank(text)
        top = ranked[0][1] if ranked else 0.0
        total = sum(max(s, 0.0) for _, s in ranked) or 1.0
        confidence = max(top, 0.0) / total
        source = "deterministic"
        seeded: dict[str, Any] = {}
        if proposer is not None:
            proposal, why = self._propose(proposer, text, known or {}, received_at, tz)
            if proposal is None:
                source = f"deterministic (the model's answer was refused: {why})"
            elif (p_intent := proposal[0]) is not None and intent in (None, p_intent):
                _, p_entities, p_conf = proposal
                if p_conf < self.threshold and intent is None:
                    title = self.registry.intents[p_intent].title
                    return Understanding(
                        None, p_conf, ranked, {}, [],
                        [Need("intent", f"Did you mean: {title}?", options=[p_intent])],
                        source="model",
                    )  # fmt: skip
                intent, seeded, confidence, source = p_intent, p_entities, p_conf, "model"
        if intent is None:
            if top < self.min_score:
                return Understanding(
                    None, 0.0, ranked, {}, [], [],
                    can_do=[self.registry.intents[n].title for n in self.names],
                )  # fmt: skip
            if confidence < self.threshold:
                close = [n for n, s in ranked[:3] if s >= top * 0.6]
                return Understanding(
                    None,
                    confidence,
                    ranked,
                    {},
                    [],
                    [
                        Need(
                            "intent",
                            "Which did you mean: "
                            + "; ".join(self.registry.intents[n].title for n in close)
                            + "?",
                            options=close,
                        )
                    ],
                )
            intent = ranked[0][0]
        zone = ZoneInfo(tz)
        local = received_at.astimezone(zone)
        entities: dict[str, Any] = dict(known or {})
        explained: list[Explained] = []
        for name, value in seeded.items():
            if name not in entities:
                entities[name] = value
                explained.append(Explained(name, value, "proposed by the model"))
        needs: list[Need] = []
        spec = self.registry.intents[intent]
        fixed = _repair_entity_words(text)
        for ent in [*spec.required, *spec.optional]:
            if ent.name in entities:
                continue
            # dates, lengths and places read the repaired text; titles and queries as written
            source_text = (
                fixed if ent.type in {"datetime", "integer"} or ent.name == "consulate" else text
            )
            got = _extract(ent.name, ent.type, source_text, local, contacts)
            if isinstance(got, Need):
                needs.append(got)
            elif got is not None:
                value, words = got
                entities[ent.name] = value
                explained.append(Explained(ent.name, value, words))
        missing = [e for e in spec.required if e.name not in entities]
        if follow_up and len(missing) == 1 and missing[0].type == "string" and not explained:
            # a reply in a conversation that was asked for one free-text value is that value
            # ("Which country?" → "PT"), when nothing else in it was understood
            answer = text.strip().strip(".!?").strip()
            if 0 < len(answer) <= 200 and not any(n.entity == missing[0].name for n in needs):
                entities[missing[0].name] = answer
                explained.append(Explained(missing[0].name, answer, answer))
        for ent in spec.required:
            if ent.name not in entities and not any(n.entity == ent.name for n in needs):
                needs.append(Need(ent.name, ent.question))
        return Understanding(intent, confidence, ranked, entities, explained, needs, source=source)

    def _propose(
        self,
        proposer: IntentProposer,
        text: str,
        known: Mapping[str, Any],
        received_at: datetime,
        tz: str,
    ) -> tuple[tuple[str | None, dict[str, Any], float] | None, str]:
        """The proposer's checked answer, asked at most twice; or None and why not."""
        why = ""
        for _ in range(2):
            try:
                raw = proposer.propose(
                    text,
                    catalogue=self.catalogue,
                    known=dict(known),
                    received_at=received_at,
                    tz=tz,
                )
                return check_proposal(raw, self.registry), ""
            except ProposalError as e:
                why = str(e)
            except Exception as e:
                why = f"the model failed ({type(e).__name__})"
        return None, why


# ---- entities ------------------------------------------------------------------------------------
Got = tuple[Any, str] | Need | None


def _extract(name: str, kind: str, text: str, local: datetime, contacts: Sequence[Contact]) -> Got:
    if kind == "list" and name == "participants":
        return _people(text, contacts)
    if kind == "list" and name == "consulates":
        places = _places(text)
        return ([p for p, _ in places], " or ".join(p for p, _ in places)) if places else None
    if kind == "email":
        m = re.search(r"\b(?:to|at)\s+(" + _EMAIL.pattern + ")", text)
        return (m.group(1), m.group(0)) if m and name.startswith("notify") else None
    if kind == "integer" and name == "duration_min":
        return _duration(text)
    if kind == "integer" and name == "poll_interval_s":
        return _every(text)
    if kind == "integer" and name == "max_lifetime_s":
        m = re.search(
            r"\b(?:for|within)\s+(?:up\s+to\s+|at\s+most\s+)?([0-9]+|" + "|".join(_NUMBERS) + r")"
            r"\s+(hours?|days?|weeks?)\b",
            text.lower(),
        )
        return (_number(m.group(1)) * _UNIT_S[m.group(2).rstrip("s")], m.group(0)) if m else None
    if kind == "integer" and name == "quantity":
        m = re.search(rf"\b{_BUY}\s+([0-9]+|" + "|".join(_NUMBERS) + r")\b", text.lower())
        return (_number(m.group(1)), m.group(0)) if m else None
    if kind == "string" and name == "max_price":
        return _amount(text)
    if kind == "string" and name == "title":
        return _title(text)
    if kind == "string" and name == "query":
        m = re.search(
            rf"\b{_BUY}\s+(?:[0-9]+\s+|(?:a|an|one|two|three|four|five|some)\s+)?(.+?)"
            r"(?:\s+(?:under|below|for|max|up to|at most|less than|and)\b|$)",
            text,
            re.I,
        )
        return (m.group(1).strip(" ."), m.group(0)) if m else None
    if kind == "string" and name == "consulate":
        places = _places(text)
        return places[0] if places else None
    if kind == "boolean" and name == "hold":
        m = re.search(
            r"\b(?:and\s+)?(?:hold|reserve|keep)\s+(?:it|one|the\s+slot|a\s+slot)\b", text, re.I
        )
        return (True, m.group(0)) if m else None
    if kind == "datetime":
        window = _window(text, local)
        if window is None:
            return None
        (start, end), words = window
        value = start if name in {"window_start", "date_from"} else end
        return (format_utc(value), words)
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
        r"\bevery\s+([0-9]+|"
        + "|".join(_NUMBERS)
        + r")\s+(seconds?|secs?|minutes?|mins?|hours?|days?)\b",
        low,
    )
    if m:
        unit = re.sub(r"s$", "", m.group(2))
        return (_number(m.group(1)) * _UNIT_S[unit], m.group(0))
    for words, seconds in _EVERY_WORD.items():
        if re.search(rf"\b{words}\b", low):
            return (seconds, words)
    return None


#: words after "in" / "at" that name no place ("in two weeks", "at least", "in the morning")
_NOT_PLACES = (
    _STOP
    | set(_MONTHS)
    | set(_WEEKDAYS)
    | set(_NUMBERS)
    | set(_PARTS)
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


#: the words entity extraction looks for, which misspellings are repaired to ("tomorow")
_ENTITY_WORDS = [
    "tomorrow", "today", "afternoon", "morning", "evening", "minutes", "hours", "consulate",
    "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday", "weeks",
    *_MONTHS,
]  # fmt: skip


def _repair_entity_words(text: str) -> str:
    """``text`` with misspelt date and entity words repaired (difflib, cutoff 0.8; words of five
    letters or more; anything else untouched)."""

    def fix(m: re.Match[str]) -> str:
        word = m.group(0)
        low = word.lower()
        if len(low) < 5 or low in _ENTITY_WORDS:
            return word
        close = difflib.get_close_matches(low, _ENTITY_WORDS, n=1, cutoff=0.8)
        return close[0] if close else word

    return re.sub(r"[A-Za-z]+", fix, text)


def _number(word: str) -> int:
    return int(word) if ascii_digits(word) else _NUMBERS[word.lower()]


def _people(text: str, contacts: Sequence[Contact]) -> Got:
    emails = list(dict.fromkeys(_EMAIL.findall(text)))
    words = [f"{e}" for e in emails]
    low = text.lower()
    by_first: dict[str, list[Contact]] = {}
    for c in contacts:
        by_first.setdefault(c.name.split()[0].lower(), []).append(c)
    for first, matches in by_first.items():
        if not re.search(rf"\b{re.escape(first)}\b", low):
            continue
        full = [c for c in matches if c.name.lower() in low]
        chosen = full or matches
        if len(chosen) > 1:
            return Need(
                "participants",
                f"Which {first.title()} do you mean: "
                + " or ".join(f"{c.name} <{c.email}>" for c in chosen)
                + "?",
                options=[c.email for c in chosen],
            )
        if chosen[0].email not in emails:
            emails.append(chosen[0].email)
            words.append(chosen[0].name.split()[0] if not full else chosen[0].name)
    return (emails, ", ".join(words)) if emails else None


def _duration(text: str) -> Got:
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
        hours = float(n) if ascii_digits(n[0]) else float(_NUMBERS[n])
        return (int(hours * 60), m.group(0))
    m = re.search(r"\b([0-9]+|" + "|".join(_NUMBERS) + r")\s*(?:-\s*)?(?:minutes?|mins?|m)\b", low)
    if m:
        return (_number(m.group(1)), m.group(0))
    return None


def _amount(text: str) -> Got:
    m = re.search(
        r"\b(?:under|below|max(?:imum)?|up to|at most|less than|for)\s*(?:€|eur\s*|\$)?\s*"
        r"([0-9]+(?:[.,][0-9]{1,2})?)\s*(?:€|euros?|eur|dollars?|usd)?",
        text,
        re.I,
    )
    if not m:
        return None
    value = float(m.group(1).replace(",", "."))
    return (f"{value:.2f}", m.group(0).strip())


def _title(text: str) -> Got:
    m = re.search(r"[\"“']([^\"”']{2,80})[\"”']", text)
    if m:
        return (m.group(1).strip(), m.group(0))
    m = re.search(
        r"\b(?:called|titled|named|about)\s+(.{2,60}?)(?:[.,;]|\s+(?:with|on|at|next|tomorrow|for)\b|$)",
        text,
        re.I,
    )
    if m:
        return (m.group(1).strip(), m.group(0))
    return None


def _at(day: date, hour: int, zone: Any, minute: int = 0) -> datetime:
    return datetime.combine(day, time(hour, minute), tzinfo=zone)


def _window(text: str, local: datetime) -> tuple[tuple[datetime, datetime], str] | None:
    """A window of time a phrase names, in the caller's zone (returned as aware datetimes)."""
    low = text.lower()
    zone = local.tzinfo
    today = local.date()
    part = next((p for p in _PARTS if re.search(rf"\b{p}\b", low)), None)
    h1, h2 = _PARTS[part] if part else WORK_DAY
    after = re.search(r"\bafter\s+([0-9]{1,2})(?::([0-9]{2}))?\s*(am|pm)?", low)
    if after:
        hour = int(after.group(1))
        if after.group(3) == "pm" or (after.group(3) is None and hour < 8):
            hour += 12
        h1 = min(hour, h2 - 1)

    def span(first: date, last: date, words: str) -> tuple[tuple[datetime, datetime], str]:
        start = _at(first, h1, zone)
        if first == today and start < local:
            start = local.replace(second=0, microsecond=0)
        return (start, _at(last, h2, zone)), words

    absolute = _calendar_date(low, today)
    if absolute is not None:
        d, words = absolute
        return span(
            d, d, words + (f" {part}" if part else "") + (f" {after.group(0)}" if after else "")
        )
    m = re.search(r"\bwithin\s+(?:the\s+next\s+)?(\w+)\s+(days?|weeks?)\b", low)
    if m:
        n = _number(m.group(1)) if m.group(1) in _NUMBERS or ascii_digits(m.group(1)) else 1
        days = n * (7 if m.group(2).startswith("week") else 1)
        return span(today, today + timedelta(days=days), m.group(0))
    if re.search(r"\btomorrow\b", low):
        d = today + timedelta(days=1)
        return span(
            d,
            d,
            "tomorrow" + (f" {part}" if part else "") + (f" {after.group(0)}" if after else ""),
        )
    if re.search(r"\btoday\b", low):
        return span(today, today, "today")
    m = re.search(r"\bnext week\b", low)
    if m:
        monday = today + timedelta(days=7 - today.weekday())
        return span(monday, monday + timedelta(days=4), m.group(0))
    m = re.search(r"\bthis week\b", low)
    if m:
        friday = today + timedelta(days=max(0, 4 - today.weekday()))
        return span(today, friday, m.group(0))
    m = re.search(r"\b(next|this|on)?\s*(" + "|".join(_WEEKDAYS) + r")\b", low)
    if m:
        wd = _WEEKDAYS.index(m.group(2))
        ahead = (wd - today.weekday()) % 7 or 7
        if m.group(1) == "next" and ahead < 7 and today.weekday() < wd:
            ahead += 7
        d = today + timedelta(days=ahead)
        return span(d, d, m.group(0).strip() + (f" {part}" if part else ""))
    m = re.search(r"\bin\s+(" + "|".join(_MONTHS) + r")\b", low)
    if m:
        month = _MONTHS.index(m.group(1)) + 1
        year = today.year + (1 if month < today.month else 0)
        first = date(year, month, 1)
        last = (date(year + (month == 12), month % 12 + 1, 1)) - timedelta(days=1)
        first = max(today, first)
        return span(first, last, m.group(0))
    return None


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


def tokens(text: str) -> Iterable[str]:
    """The words Intake reads (for explanations and tests)."""
    return _tokens(text)
