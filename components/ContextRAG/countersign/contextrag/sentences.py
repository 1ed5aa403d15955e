"""The one sentence a person reads about each evidence item (``Evidence.why``, GLOBAL_SPEC §3),
and the value as words (never JSON braces). Pure: the dates are the items' own.

"You set default meeting length to 45 (your preference, set 3 Nov 2026)." · "Bob is in your contacts
(bob@example.com)." · "Duration min was 30 in 4 of your last 5 successful schedule meeting
runs." · "3 of your last 4 schedule meeting runs succeeded; the latest, on 24 Nov 2026, ran
caldav.create_event."
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from pydantic import JsonValue

__all__ = [
    "contact_why",
    "conversation_why",
    "fact_why",
    "history_why",
    "label",
    "pattern_why",
    "pref_why",
    "spoken",
]

#: longest value text inside a sentence (the sentence stays well within Evidence's 300)
_VALUE_CHARS = 90


def label(key: str) -> str:
    """A key as words: ``default_meeting_length`` → ``default meeting length``."""
    return " ".join(key.replace("_", " ").replace(".", " ").split()) or key


def _words(value: JsonValue) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:
        return "none"
    if isinstance(value, list):
        return ", ".join(_words(v) for v in value) or "none"
    if isinstance(value, dict) and set(value) == {"start", "end"}:
        return f"{_words(value['start'])}–{_words(value['end'])}"
    if isinstance(value, dict):
        return "; ".join(f"{label(str(k))} {_words(v)}" for k, v in value.items()) or "none"
    return str(value)


def spoken(value: JsonValue) -> str:
    """A JSON value as a person reads it: text as it is, lists joined by commas, objects as
    ``name value; name value`` — no braces (not even a person's own), brackets or quotes; cut
    at 90 characters."""
    text = " ".join(_words(value).split()).replace("{", "(").replace("}", ")")
    return text if len(text) <= _VALUE_CHARS else text[: _VALUE_CHARS - 1].rstrip() + "…"


def _day(at: datetime) -> str:
    return f"{at.day} {at:%b %Y}"


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def pref_why(key: str, value: JsonValue, at: datetime) -> str:
    """A profile preference (T2)."""
    return f"You set {label(key)} to {spoken(value)} (your preference, set {_day(at)})."


def conversation_why(key: str, value: JsonValue) -> str:
    """A value said earlier in this conversation (T1)."""
    return f"You said {label(key)} is {spoken(value)} earlier in this conversation."


def contact_why(name: str, value: JsonValue) -> str:
    """A contact the intent names."""
    extra = spoken(value)
    return f"{name} is in your contacts" + ("." if extra == name else f" ({extra}).")


def pattern_why(key: str, value: JsonValue, runs: int, total: int, intent: str) -> str:
    """A value this intent took in most of its past successful runs (counted per run)."""
    plural = "run" if total == 1 else "runs"
    return (
        f"{_cap(label(key))} was {spoken(value)} in {runs} of your last {total} successful "
        f"{label(intent)} {plural}."
    )


def history_why(intent: str, key: str, value: JsonValue, ok: int, runs: int, at: datetime) -> str:
    """How this intent's recent runs went (counted per run) and what the latest recorded."""
    if isinstance(value, Mapping) and isinstance(value.get("op"), str):
        latest = f"ran {value['op']}"
    else:
        latest = f"had {label(key)} {spoken(value)}"
    if runs == 1:
        went = "succeeded" if ok else "did not succeed"
        return f"Your {label(intent)} plan of {_day(at)} {went}; it {latest}."
    return (
        f"{ok} of your last {runs} {label(intent)} runs succeeded; the latest, on {_day(at)}, "
        f"{latest}."
    )


def fact_why(kind: str, key: str, value: JsonValue, at: datetime, purpose: str | None) -> str:
    """A fact the person told the memory (``POST /v1/memory/facts``)."""
    allowed = f", used because you allowed {label(purpose)}" if purpose else ""
    if kind == "contact":
        return f"{key} is in your contacts ({spoken(value)}{allowed})."
    return f"You told Countersign your {label(key)} is {spoken(value)} ({_day(at)}{allowed})."
