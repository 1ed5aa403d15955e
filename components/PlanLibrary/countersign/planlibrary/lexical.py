"""The in-memory lexical channel: Okapi BM25 from ``rank-bm25`` over a list of entries.

Measured against PostgreSQL full-text (``store.py``) on the labeled set and at 100,000 plans
(LLD.md §2): the store uses PostgreSQL; this index serves the recall comparison and small
in-process libraries (tests, the benchmarks' baseline)."""

from __future__ import annotations

from collections.abc import Sequence

from rank_bm25 import BM25Okapi

from .core import terms
from .models import Candidate, LibraryEntry

__all__ = ["Bm25Index"]


class Bm25Index:
    """BM25Okapi over the entries' ``terms`` (the same tokens the store's tsquery uses)."""

    def __init__(self, entries: Sequence[LibraryEntry]) -> None:
        self.entries = list(entries)
        self._docs = [terms(e.text) for e in self.entries]
        self._sets = [set(d) for d in self._docs]
        # rank-bm25 divides by the vocabulary's size: a library whose texts hold no meaningful
        # term (only numbers, dates, stop words) has no lexical channel
        self._bm25 = BM25Okapi(self._docs) if any(self._docs) else None

    def search(self, query: str, k: int) -> list[Candidate]:
        """The ``k`` best entries with a positive score, best first."""
        q = terms(query)
        if self._bm25 is None or not q:
            return []
        scores = self._bm25.get_scores(q)
        order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:k]
        return [
            Candidate(
                entry=self.entries[i],
                lexical=float(scores[i]),
                matched=tuple(t for t in q if t in self._sets[i]),
            )
            for i in order
            if scores[i] > 0
        ]
