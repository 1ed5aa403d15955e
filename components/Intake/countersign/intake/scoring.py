"""Scoring Intake against a labelled sentence set (components/Intake/tests/data/README.md).

Pure: rows in, figures out. The same scorer serves the dev-set test, the test-set report
(``bench/bench_intake_understanding.py``) and anyone tuning on the dev set. Labels record only what
a sentence says; Intake is given a contact book holding the people the labels name (with e-mail
addresses made up here) plus people the sentences never name, and the person asking, ``ME``.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation
from importlib import import_module
from pathlib import Path
from typing import Any

from .core import Intake
from .models import Contact, Understanding

__all__ = ["ME", "Report", "contact_book", "load_rows", "score"]

#: the person asking, in every scored conversation
ME = Contact("Robin Asker", "robin@example.com")
#: people of the book the sentences never name (a first name may collide with a named one)
_OTHERS = (
    "Marta Kowalska", "Henrik Larsen", "Yuki Tanaka", "Ola Adeyemi", "Grace Hopper",
    "Ines Duarte", "Tomás Ruiz", "Fatima Zahra", "Lena Vogel", "Pierre Martin",
)  # fmt: skip
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+$")
_ARTICLES = {"a", "an", "the", "some"}


def load_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of one JSON-lines sentence set."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _slug(name: str) -> str:
    plain = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode().lower()
    return re.sub(r"[^a-z0-9]+", ".", plain).strip(".") or "someone"


def contact_book(rows: Iterable[Mapping[str, Any]]) -> list[Contact]:
    """Every person the rows name without an e-mail, as a contact with a made-up address, and
    people no row names."""
    names: dict[str, Contact] = {}
    for row in rows:
        for person in row["entities"].get("participants", []):
            if not _EMAIL.match(person):
                names.setdefault(person.lower(), Contact(person, f"{_slug(person)}@contacts.test"))
    others = [Contact(n, f"{_slug(n)}@contacts.test") for n in _OTHERS]
    return [*names.values(), *others]


@dataclass
class Report:
    """Figures of one scored set."""

    rows: int = 0
    intent_right: int = 0
    family_right: int = 0
    refused_right: int = 0
    refusable: int = 0
    plans_from_refusable: int = 0
    per_class: Counter[str] = field(default_factory=Counter)
    per_class_right: Counter[str] = field(default_factory=Counter)
    entity_total: Counter[str] = field(default_factory=Counter)
    entity_right: Counter[str] = field(default_factory=Counter)
    extra_guesses: Counter[str] = field(default_factory=Counter)
    missing_required: int = 0
    asked_for_missing: int = 0
    unnecessary_questions: int = 0
    fully_right: int = 0
    #: an intent other than the labelled one (or any intent for cannot-do/hostile text) ...
    wrong_intents: int = 0
    #: ... against a question about which intent was meant (the calibration: wrong < asked)
    asked_intent: int = 0
    misses: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """The figures as JSON (ratios rounded to 3 places)."""
        total = sum(self.entity_total.values())
        right = sum(self.entity_right.values())
        return {
            "rows": self.rows,
            "intent_accuracy": _ratio(self.intent_right, self.rows),
            "meeting_family_accuracy": _ratio(self.family_right, self.rows),
            "per_class": {
                k: f"{self.per_class_right[k]}/{n}" for k, n in sorted(self.per_class.items())
            },
            "refused": f"{self.refused_right}/{self.refusable}",
            "plans_from_cannot_or_hostile": self.plans_from_refusable,
            "entity_accuracy": _ratio(right, total),
            "entities": {
                k: f"{self.entity_right[k]}/{n}" for k, n in sorted(self.entity_total.items())
            },
            "extra_guesses": dict(sorted(self.extra_guesses.items())),
            "asked_instead_of_guessed": f"{self.asked_for_missing}/{self.missing_required}",
            "unnecessary_questions_per_10": _ratio(10 * self.unnecessary_questions, self.rows),
            "fully_right": f"{self.fully_right}/{self.rows}",
            "wrong_intents": self.wrong_intents,
            "asked_which_intent": self.asked_intent,
        }


def _ratio(a: int, b: int) -> float:
    return round(a / b, 3) if b else 0.0


def score(intake: Intake, rows: Sequence[Mapping[str, Any]], contacts: Sequence[Contact]) -> Report:
    """Read each row's text once, as the first message of a conversation, and score it."""
    report = Report()
    for row in rows:
        u = intake.understand(
            row["text"],
            received_at=datetime.fromisoformat(row["received_at"].replace("Z", "+00:00")),
            tz=row["tz"],
            contacts=contacts,
            me=ME,
        )
        required = [e.name for e in intake.registry.intents[u.intent].required] if u.intent else []
        _score_row(report, row, u, contacts, required)
    return report


def _klass(row: Mapping[str, Any]) -> str:
    if row["hostile"]:
        return "hostile"
    return "cannot" if row["intent"] is None else str(row["intent"])


def _score_row(
    report: Report,
    row: Mapping[str, Any],
    u: Understanding,
    contacts: Sequence[Contact],
    required: Sequence[str],
) -> None:
    report.rows += 1
    klass = _klass(row)
    report.per_class[klass] += 1
    want = row["intent"]
    miss: dict[str, Any] = {"id": row["id"], "text": row["text"]}
    if want is None:
        report.refusable += 1
        refused = u.refusal is not None
        report.refused_right += refused
        report.plans_from_refusable += u.ready
        right = refused
        if not right:
            miss["intent"] = {"want": None, "got": u.intent, "needs": [n.entity for n in u.needs]}
    else:
        right = u.intent == want
        meeting = {"find_meeting_time", "schedule_meeting"}
        report.family_right += right or (u.intent in meeting and want in meeting)
        if not right:
            miss["intent"] = {"want": want, "got": u.intent, "refusal": _refusal(u)}
    report.intent_right += right
    report.wrong_intents += u.intent is not None and u.intent != want
    report.asked_intent += any(n.entity == "intent" for n in u.needs)
    report.per_class_right[klass] += right
    if want is None:
        report.family_right += right
    entities_ok = _score_entities(report, row, u, contacts, miss, required) if want else True
    if right and entities_ok:
        report.fully_right += 1
    if len(miss) > 2:
        report.misses.append(miss)


def _refusal(u: Understanding) -> str | None:
    return f"{u.refusal.kind}:{u.refusal.what}" if u.refusal else None


def _score_entities(
    report: Report,
    row: Mapping[str, Any],
    u: Understanding,
    contacts: Sequence[Contact],
    miss: dict[str, Any],
    required: Sequence[str],
) -> bool:
    """Each labelled entity against what Intake read; extra guesses; questions asked."""
    labels: Mapping[str, Any] = row["entities"]
    asked = {n.entity: n for n in u.needs}
    same_intent = bool(u.intent == row["intent"])
    ok = same_intent
    for name, want in labels.items():
        report.entity_total[name] += 1
        got = u.entities.get(name) if same_intent else None
        good = same_intent and _same(name, want, got, asked.get(name), contacts)
        report.entity_right[name] += good
        if not good:
            ok = False
            miss.setdefault("entities", {})[name] = {"want": want, "got": _shown(got, name, asked)}
        if same_intent and name in asked and not asked[name].heard:
            report.unnecessary_questions += 1
    if not same_intent:
        return False
    said = {e.entity for e in u.explained}
    for name in said - set(labels):
        if name in u.entities and not (name == "participants" and _only_me(u.entities[name])):
            report.extra_guesses[name] += 1
            ok = False
            miss.setdefault("extra", {})[name] = u.entities[name]
    for name in required:  # each required entity the sentence leaves out: asked for?
        if name not in labels:
            report.missing_required += 1
            report.asked_for_missing += name in asked
    return ok


def _only_me(value: Any) -> bool:
    return isinstance(value, list) and value == [ME.email]


def _shown(got: Any, name: str, asked: Mapping[str, Any]) -> Any:
    need = asked.get(name)
    return got if need is None else {"asked": need.question, "heard": need.heard}


def _same(name: str, want: Any, got: Any, need: Any, contacts: Sequence[Contact]) -> bool:
    """One labelled entity against Intake's value (README, conventions)."""
    if name == "participants":
        return _same_people(want, got, contacts)
    if name == "max_price":
        return _same_price(want, got, need)
    if name in {"consulate", "consulates"} and need is not None:
        return _asked_city(want, need)
    compare = _COMPARE.get(name)
    return compare(want, got) if compare else bool(got == want)


def _same_people(want: list[str], got: Any, contacts: Sequence[Contact]) -> bool:
    if not isinstance(got, list):
        return False
    by_name = {c.name.lower(): c.email for c in contacts}
    expected = {by_name.get(p.lower(), p).lower() for p in want}
    return expected == {g.lower() for g in got if g.lower() != ME.email}


def _same_price(want: Mapping[str, Any], got: Any, need: Any) -> bool:
    currency = want.get("currency")
    if currency in (None, "EUR"):
        return _decimal(got) is not None and _decimal(got) == _decimal(want["amount"])
    heard = getattr(need, "heard", None)
    return (
        isinstance(heard, Mapping)
        and heard.get("currency") == currency
        and _decimal(heard.get("amount")) == _decimal(want["amount"])
    )


def _asked_city(want: Any, need: Any) -> bool:
    """A consulate said by its country alone, asked for its city: right when the label has no
    city either (the sentence did not say it) and the country heard is the labelled one."""
    wants = want if isinstance(want, list) else [want]
    heard = getattr(need, "heard", None) or {}
    return any(w["city"] is None and w["country"] == heard.get("country") for w in wants)


def _decimal(value: Any) -> Decimal | None:
    try:
        return Decimal(str(value))
    except (InvalidOperation, ValueError):
        return None


def _same_places(want: Any, got: Any) -> bool:
    try:
        describe = import_module(f"{__package__}.places").describe
    except (ImportError, AttributeError):  # no places reader yet
        return False
    wants = want if isinstance(want, list) else [want]
    gots = got if isinstance(got, list) else [got]
    if not all(isinstance(g, str) for g in gots):
        return False
    return {(w["country"], w["city"]) for w in wants} == {describe(g) for g in gots}


def _plain_title(text: str) -> str:
    low = text.strip().strip("\"'“”‘’").strip().lower()
    return re.sub(r"^(?:the|a|an)\s+", "", low)


def _content(text: str) -> set[str]:
    words = re.findall(r"[\w.()]+", text.lower())
    return {w.rstrip("s") if len(w) > 3 else w for w in words if w not in _ARTICLES}


def _instant(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _same_text(want: Any, got: Any) -> bool:
    return isinstance(got, str) and _plain_title(got) == _plain_title(want)


def _same_query(want: Any, got: Any) -> bool:
    return isinstance(got, str) and _content(got) == _content(want)


def _same_instant(want: Any, got: Any) -> bool:
    return isinstance(got, str) and _instant(got) == _instant(want)


_COMPARE = {
    "consulates": _same_places,
    "consulate": _same_places,
    "title": _same_text,
    "query": _same_query,
    "window_start": _same_instant,
    "window_end": _same_instant,
    "date_from": _same_instant,
    "date_to": _same_instant,
}
