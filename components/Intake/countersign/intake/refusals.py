"""What Intake answers and never plans: text addressed to the system itself (instructions, prompt
injection) and requests for what this service cannot do (cancel, reschedule, delete, transfer,
pay, read mail, and other things no intent serves) — Intake SPEC, "Refusals".

The list is data (``data/refusals.yaml``), read once. Hostile cues count anywhere in the message;
a cannot-do ``verb`` counts only where a clause starts, after politeness ("please", "can you", "I
need to"), so that "cancel" in "a meeting about the cancelled order" is none; a cannot-do ``cue``
names a topic no intent serves (a flight, the weather) and counts anywhere, unless its ``unless``
matches. Pure: text in, a ``Refusal`` or None out.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources

from countersign.kernel import loads_yaml_strict

from .models import Refusal

__all__ = ["LEAD", "Refuser", "refuser"]

#: politeness and framing before a clause's verb ("please", "can you", "I need to", "hey,")
LEAD = re.compile(
    r"^(?:\s*(?:hey|hi|hello|ok|okay|so|please|pls|plz|kindly|just|also|and|then|now|"
    r"can you|could you|would you|will you|can u|could u|pls|i need you to|i want you to|"
    r"i'd like you to|i would like you to|i need to|i want to|i'd like to|i would like to|"
    r"help me|go ahead and|let's|lets)\b[\s,!]*)*"
)
#: where a clause starts: the text's start, a sentence end, a semicolon, ", and", "then"
_CLAUSES = re.compile(r"[.;!?\n]+|,\s*(?:and\s+)?then\b|\band then\b|,\s*and\b")


@dataclass(frozen=True)
class _Entry:
    kind: str
    what: str
    message: str
    verbs: re.Pattern[str] | None
    cues: re.Pattern[str] | None
    unless: re.Pattern[str] | None


def _alternation(parts: Sequence[str]) -> str:
    return "|".join(f"(?:{p})" for p in parts)


def _entry(kind: str, raw: dict[str, object]) -> _Entry:
    verbs = raw.get("verb") or []
    cues = raw.get("cues") or []
    unless = raw.get("unless")
    if not isinstance(verbs, list) or not isinstance(cues, list):
        raise TypeError(f"intake/data/refusals.yaml: {raw.get('what')}: verb and cues are lists")
    return _Entry(
        kind,
        str(raw["what"]),
        str(raw["message"]),
        re.compile(rf"^(?:{_alternation(verbs)})\b") if verbs else None,
        re.compile(_alternation(cues)) if cues else None,
        re.compile(str(unless)) if unless else None,
    )


class Refuser:
    """The declared refusals, compiled; ``check`` per message."""

    def __init__(self, document: dict[str, list[dict[str, object]]]) -> None:
        self.entries = [_entry("hostile", e) for e in document.get("hostile", [])] + [
            _entry("cannot", e) for e in document.get("cannot", [])
        ]

    def check(self, text: str, can_do: Sequence[str] = ()) -> Refusal | None:
        """The first entry the message matches (hostile ones first), as the answer to give;
        ``can_do``: titles of what this service can do, named in a cannot-do answer."""
        low = _plain(text)
        clauses = [LEAD.sub("", c.strip()) for c in _CLAUSES.split(low)]
        for e in self.entries:
            words = _matched(e, low, clauses)
            if words is None:
                continue
            message = e.message
            if e.kind == "cannot" and can_do:
                message += " I can: " + "; ".join(can_do) + "."
            return Refusal(e.kind, e.what, message, words)
        return None


def _matched(e: _Entry, low: str, clauses: Sequence[str]) -> str | None:
    """The words of ``low`` that match entry ``e``, or None."""
    if e.unless is not None and e.unless.search(low):
        return None
    if e.cues is not None and (m := e.cues.search(low)):
        return m.group(0)
    if e.verbs is not None:
        for clause in clauses:
            if m := e.verbs.search(clause):
                return m.group(0)
    return None


def _plain(text: str) -> str:
    """``text`` as its letters read: NFKC (full-width and compatibility forms folded), format
    characters (zero-width joiners, soft hyphens, direction marks) dropped, lower case — so
    "ｉｇｎｏｒｅ" and "ig\u200bnore" are "ignore"."""
    folded = unicodedata.normalize("NFKC", text)
    return "".join(c for c in folded if unicodedata.category(c) != "Cf").lower()


@cache
def refuser() -> Refuser:
    """The shipped refusals (``data/refusals.yaml``), compiled once."""
    raw = resources.files(__package__).joinpath("data/refusals.yaml").read_bytes()
    document = loads_yaml_strict(raw, what="intake/data/refusals.yaml")
    if not isinstance(document, dict):
        raise TypeError("intake/data/refusals.yaml: a mapping of hostile and cannot")
    return Refuser(document)
