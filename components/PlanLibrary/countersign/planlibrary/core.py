"""PlanRetrieval's pure core: the text a plan is indexed by, query terms, the hybrid score, the
one-line "why", and the ``exemplar`` evidence items (PlanLibrary SPEC §2–§4).

No I/O, no clock, no randomness: ``now`` is an argument. The store (``store.py``) finds the
candidates; this module ranks them, so the same ranking runs over rank-bm25 in memory, over
PostgreSQL full-text and over the benchmarks' synthetic data.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from countersign.kernel import Evidence, Intent, Plan, RetrievalWeights, format_utc

from .models import Candidate, LibraryEntry, Ranked

__all__ = [
    "intent_text",
    "merge",
    "plan_text",
    "rank",
    "terms",
    "to_evidence",
    "why_line",
]

_TOKEN = re.compile(r"[a-z0-9]+")
#: words that carry no meaning for matching plans (kept short: entity words must survive)
_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "at",
        "by",
        "for",
        "from",
        "in",
        "into",
        "is",
        "it",
        "me",
        "my",
        "of",
        "on",
        "or",
        "our",
        "please",
        "the",
        "to",
        "up",
        "with",
    ]
)
_MAX_TERMS = 32


def terms(text: str) -> list[str]:
    """Lower-case ASCII word tokens of ``text`` without stop words, in order, each once.

    Only ``[a-z0-9]+`` survives, so a term is always safe inside a tsquery."""
    seen: dict[str, None] = {}
    for t in _TOKEN.findall(text.lower()):
        if t not in _STOP and t not in seen:
            seen[t] = None
            if len(seen) >= _MAX_TERMS:
                break
    return list(seen)


def _flat(value: Any) -> Iterable[str]:
    if isinstance(value, Mapping):
        for k in sorted(value):
            yield from _flat(value[k])
    elif isinstance(value, list):
        for v in value:
            yield from _flat(v)
    elif isinstance(value, bool) or value is None:
        return
    else:
        yield str(value)


def intent_text(intent: Intent, request: str | None = None) -> str:
    """What an intent is searched by: the intent's name in words, the person's request (chat
    text, when known), then the entity values."""
    parts = [intent.intent.replace("_", " ").replace(".", " ")]
    if request:
        parts.append(" ".join(request.split()))
    parts.extend(_flat(intent.entities))
    return " ".join(parts)[:4000]


def plan_text(plan: Plan, request: str | None = None) -> str:
    """What a stored plan is indexed by: its intent's text and the ops its steps call."""
    ops = " ".join(f"{s.uses} {s.call}".replace("_", " ").replace(".", " ") for s in plan.graph)
    return f"{intent_text(plan.intent, request)} {ops}"[:4000]


def _success(e: LibraryEntry) -> float:
    return (e.success_count + 1) / (e.success_count + e.failure_count + 2)


def _recency(e: LibraryEntry, now: datetime, half_life_days: float) -> float:
    last = e.last_used_at or e.created_at
    age = max(0.0, (now - last).total_seconds() / 86400)
    return math.pow(0.5, age / half_life_days)


def _age(e: LibraryEntry, now: datetime) -> str:
    last = e.last_used_at
    if last is None:
        return "never used"
    days = max(0, int((now - last).total_seconds() // 86400))
    return "last used today" if days == 0 else f"last used {days} d ago"


def why_line(c: Candidate, parts: Mapping[str, float], now: datetime) -> str:
    """One line a person can read: terms matched, similarity, successes, last used."""
    e = c.entry
    matched = ", ".join(c.matched[:6]) if c.matched else "none"
    sim = "n/a" if c.cosine is None else f"{c.cosine:.2f}"
    runs = e.success_count + e.failure_count
    return (
        f"terms matched: {matched}; similarity {sim}; "
        f"{e.success_count}/{runs} runs succeeded; {_age(e, now)}"
    )[:256]


def _scaler(values: Sequence[float], single: Callable[[float], float]) -> Callable[[float], float]:
    lo, hi = min(values, default=0.0), max(values, default=0.0)
    if hi - lo <= 1e-12:
        return single
    return lambda x: (x - lo) / (hi - lo)


def rank(
    candidates: Sequence[Candidate],
    *,
    weights: RetrievalWeights,
    now: datetime,
    top_k: int | None = None,
) -> list[Ranked]:
    """The candidates by hybrid score, best first (ties: newer, then plan id), at most
    ``top_k`` (default ``weights.top_k``), none below ``weights.min_score``.

    Each channel is scaled to 0..1 inside this candidate set (min-max; one candidate, or all
    equal: the lexical part is 1 when it matched, the vector part the cosine clipped at 0), so
    scores rank one query's candidates and are not comparable across queries (LLD §3: min-max
    beat max-only scaling and reciprocal-rank fusion on the labeled set). Duplicated plan ids
    (found by both channels) must be merged by the caller (``merge``)."""
    lex = _scaler([c.lexical for c in candidates], lambda x: 1.0 if x > 0 else 0.0)
    cos = [c.cosine for c in candidates if c.cosine is not None]
    vec = _scaler(cos, lambda x: max(0.0, x))
    floor = min(cos, default=0.0)
    out = []
    for c in candidates:
        parts = {
            "bm25": lex(c.lexical),
            "vector": vec(c.cosine if c.cosine is not None else floor),
            "success": _success(c.entry),
            "recency": _recency(c.entry, now, weights.half_life_days),
        }
        score = (
            weights.bm25 * parts["bm25"]
            + weights.vector * parts["vector"]
            + weights.success * parts["success"]
            + weights.recency * parts["recency"]
        )
        if score < weights.min_score:
            continue
        out.append(
            Ranked(
                entry=c.entry,
                score=round(score, 6),
                parts={k: round(v, 4) for k, v in parts.items()},
                why=why_line(c, parts, now),
            )
        )
    out.sort(key=lambda r: (-r.score, -(r.entry.created_at.timestamp()), r.entry.plan_id))
    return out[: top_k or weights.top_k]


def merge(lexical: Sequence[Candidate], vector: Sequence[Candidate]) -> list[Candidate]:
    """One candidate per plan id: the lexical score and terms from one channel, the cosine from
    the other."""
    by_id: dict[str, Candidate] = {c.entry.plan_id: c for c in lexical}
    for v in vector:
        have = by_id.get(v.entry.plan_id)
        if have is None:
            by_id[v.entry.plan_id] = v
        elif have.cosine is None:
            by_id[v.entry.plan_id] = have.model_copy(update={"cosine": v.cosine})
    return list(by_id.values())


def to_evidence(ranked: Sequence[Ranked]) -> list[Evidence]:
    """``exemplar`` evidence items (GLOBAL_SPEC §3), one per ranked plan: key = the plan id,
    value = {intent, score, why, successes, failures, last_used_at}, confidence = the score."""
    out = []
    for r in ranked:
        e = r.entry
        out.append(
            Evidence(
                type="exemplar",
                key=e.plan_id,
                value={
                    "intent": e.intent,
                    "score": r.score,
                    "why": r.why,
                    "successes": e.success_count,
                    "failures": e.failure_count,
                    "last_used_at": None if e.last_used_at is None else format_utc(e.last_used_at),
                },
                confidence=max(0.0, min(1.0, r.score)),
                source_ref=f"plan_library:{e.plan_id}",
            )
        )
    return out
