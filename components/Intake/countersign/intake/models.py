"""What Intake takes in (the caller's contacts) and gives back (an ``Understanding``: the intent,
its entities with the words that gave them, and the questions still open) — Intake SPEC."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Contact", "Explained", "Need", "Refusal", "Understanding"]


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
    #: what the text said that could not be taken as it stands (an amount in another currency
    #: than the shop's: ``{"amount": "15", "currency": "USD"}``), shown with the question
    heard: Any = None


@dataclass(frozen=True)
class Refusal:
    """Why a message becomes an answer and never a plan: it asks for something this service
    cannot do (``kind="cannot"``: ``what`` is cancel, reschedule, delete, pay, transfer,
    read_inbox or other) or it is addressed to the system itself (``kind="hostile"``: an
    instruction, a prompt injection). ``message`` says so plainly and what it can do instead."""

    kind: str
    what: str
    message: str
    #: the words that gave it away
    words: str = ""


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
    #: set when the message must be answered and never planned (then ``intent`` is None)
    refusal: Refusal | None = None

    @property
    def ready(self) -> bool:
        """An intent, and nothing required missing."""
        return self.intent is not None and not self.needs and self.refusal is None
