"""ContextRAG's types: what a person tells the memory (facts, contacts, preferences, consent)
and one candidate item of evidence (``MemoryItem``) as the store hands it to the core."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import Field, JsonValue, field_validator, model_validator

from countersign.kernel import Contract, canonical_bytes

__all__ = [
    "MAX_FACT_BYTES",
    "ContactIn",
    "FactIn",
    "ForgetRequest",
    "MemoryItem",
    "MemoryWrite",
    "PrefsUpdate",
    "Tier",
]

Tier = Literal["T1", "T2", "T3", "T4", "T5"]
EvidenceType = Literal["preference", "history", "contact", "plan", "exemplar"]
_KEY = r"^[a-z][a-z0-9_.]{0,127}$"
_PURPOSE = r"^[a-z][a-z0-9_.-]{0,63}$"
#: a fact's value, canonical JSON, at most this many bytes (small typed facts, never blobs)
MAX_FACT_BYTES = 512


def _small(value: JsonValue, what: str, limit: int = MAX_FACT_BYTES) -> JsonValue:
    size = len(canonical_bytes(value))
    if size > limit:
        raise ValueError(f"{what} is {size} bytes of JSON; at most {limit} (a fact, not a blob)")
    return value


class FactIn(Contract):
    """One fact a person (or a derivation) tells the memory (``POST /v1/memory/facts``).

    T2 stable, T3 history and patterns, T4 live signals (give a short ``ttl_days``), T5 private
    content: derived facts only — a scalar value — and a consent ``purpose`` (used only while
    the person has granted it)."""

    tier: Literal["T2", "T3", "T4", "T5"]
    type: EvidenceType = "preference"
    key: str = Field(pattern=_KEY)
    value: JsonValue
    confidence: float = Field(default=0.8, ge=0.0, le=1.0)
    ttl_days: int | None = Field(default=None, ge=1, le=36500)
    purpose: str | None = Field(default=None, pattern=_PURPOSE)
    subject: str | None = Field(default=None, min_length=1, max_length=200)

    @field_validator("value")
    @classmethod
    def _value_small(cls, v: JsonValue) -> JsonValue:
        if v is None:
            raise ValueError("a fact needs a value")
        return _small(v, "value")

    @model_validator(mode="after")
    def _private_is_derived(self) -> FactIn:
        if self.tier == "T5":
            if self.purpose is None:
                raise ValueError("a T5 (private) fact names the consent purpose it is used under")
            if not isinstance(self.value, str | int | float | bool):
                raise ValueError("a T5 (private) fact is a derived scalar, not a document")
        elif self.purpose is not None:
            raise ValueError("only T5 (private) facts take a consent purpose")
        return self


class ContactIn(Contract):
    """One contact of the person."""

    name: str = Field(min_length=1, max_length=200)
    email: str | None = Field(default=None, pattern=r"^[^@\s]{1,64}@[^@\s]{1,255}$")
    phone: str | None = Field(default=None, pattern=r"^[0-9+()\- ]{3,40}$")
    relation: str | None = Field(default=None, min_length=1, max_length=64)


class MemoryWrite(Contract):
    """``POST /v1/memory/facts``: facts and/or contacts."""

    facts: list[FactIn] = Field(default_factory=list, max_length=100)
    contacts: list[ContactIn] = Field(default_factory=list, max_length=100)

    @model_validator(mode="after")
    def _something(self) -> MemoryWrite:
        if not self.facts and not self.contacts:
            raise ValueError("send at least one fact or contact")
        return self


class PrefsUpdate(Contract):
    """``PUT /v1/memory/prefs``: preferences to set (``null`` removes one) and consent per
    purpose (``true`` grants, ``false`` revokes)."""

    prefs: dict[str, JsonValue] = Field(default_factory=dict, max_length=64)
    consent: dict[str, bool] = Field(default_factory=dict, max_length=32)

    @field_validator("prefs")
    @classmethod
    def _prefs_ok(cls, v: dict[str, JsonValue]) -> dict[str, JsonValue]:
        for k, value in v.items():
            if not re.match(_KEY, k):
                raise ValueError(f"preference key {k[:40]!r}: lower-case letters, digits, _ and .")
            if value is not None:
                _small(value, f"preference {k!r}")
        return v

    @field_validator("consent")
    @classmethod
    def _purposes_ok(cls, v: dict[str, bool]) -> dict[str, bool]:
        for k in v:
            if not re.match(_PURPOSE, k):
                raise ValueError(f"consent purpose {k[:40]!r}: lower-case letters, digits, _.-")
        return v


class ForgetRequest(Contract):
    """``POST /v1/memory/forget``: everything (``{"all": true}``) or one subject."""

    all: bool = False
    subject: str | None = Field(default=None, min_length=3, max_length=200)

    @model_validator(mode="after")
    def _one(self) -> ForgetRequest:
        if self.all == (self.subject is not None):
            raise ValueError('send either {"all": true} or {"subject": "..."} (3+ characters)')
        return self


@dataclass(frozen=True, slots=True)
class MemoryItem:
    """One candidate for the evidence list (internal; cheap to make by the thousand)."""

    tier: Tier
    type: EvidenceType
    key: str
    value: JsonValue
    confidence: float
    source_ref: str
    created_at: datetime
    ttl_days: int | None = None
    purpose: str | None = None
    #: the sentence a person reads about why it is there (``Evidence.why``); made from the
    #: item when absent
    why: str | None = None
