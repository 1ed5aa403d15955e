"""What Intake takes in (the caller's contacts) and gives back (an ``Understanding``: the intent,
its entities with the words that gave them, and the questions still open) — Intake SPEC."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Contact", "Explained", "Need", "Understanding"]


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
