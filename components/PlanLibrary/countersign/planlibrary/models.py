"""The library's types: a stored plan's entry, a retrieval candidate, a ranked exemplar."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Candidate", "LibraryEntry", "Ranked"]


class LibraryEntry(BaseModel):
    """One signed plan in the library, with its outcome counts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    plan_id: str = Field(min_length=26, max_length=26)
    user_id: str = Field(min_length=1, max_length=128)
    intent: str = Field(min_length=1, max_length=64)
    text: str = Field(min_length=1, max_length=4000)
    success_count: int = Field(default=0, ge=0)
    failure_count: int = Field(default=0, ge=0)
    last_used_at: datetime | None = None
    created_at: datetime


class Candidate(BaseModel):
    """A stored plan one of the two channels (lexical, vector) found for a query."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    entry: LibraryEntry
    #: the lexical channel's raw score (BM25 / ts_rank_cd); 0 when only the vectors found it
    lexical: float = Field(default=0.0, ge=0.0)
    #: cosine similarity to the query (-1..1); None when the entry has no embedding
    cosine: float | None = None
    #: query terms the entry's text contains, in query order
    matched: tuple[str, ...] = ()


class Ranked(BaseModel):
    """A candidate with its hybrid score, the parts of it, and the one-sentence why."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    entry: LibraryEntry
    #: ranks this query's candidates only (channels are scaled within them)
    score: float
    parts: dict[str, float]
    why: str
    #: cosine similarity to the request clipped to 0..1 (absolute); None without a vector
    similarity: float | None = None
    #: the request's meaningful terms the plan's text holds
    matched: tuple[str, ...] = ()
