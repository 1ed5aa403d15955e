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
    "meaningful",
    "merge",
    "plan_text",
    "rank",
    "terms",
    "to_evidence",
    "why_line",
]

_TOKEN = re.compile(r"[a-z0-9]+")
#: words that carry no meaning for matching plans (kept short: entity words must survive):
#: function words, and the words of times and dates (months, weekdays, units, relative days)
_STOP_WORDS = """
    about after all also and any are ask back been before but can could did does for from get
    had has have her here him his how into its just let like make need not now off one our out
    please she some than that the their them then there these they this those too two until
    very want was were what when where which who why will with would you your yours
    january february march april may june july august september october november december
    jan feb mar apr jun jul aug sep sept oct nov dec
    monday tuesday wednesday thursday friday saturday sunday
    mon tue tues wed thu thur thurs fri sat sun
    today tomorrow yesterday tonight morning afternoon evening noon midnight week weeks
    weekend day days month months year years hour hours hrs min mins minute minutes sec
    second seconds next last utc gmt
    com org net www http https mailto
"""
_STOP = frozenset(_STOP_WORDS.split())
_MAX_TERMS = 32


def meaningful(token: str) -> bool:
    """True when a lower-case token can say what a plan is about: at least three characters,
    not a stop, time or date word, and not a number or a number with a unit or suffix
    (``30``, ``2027``, ``00``, ``9am``, ``15th``, ``30min`` — times, dates, lengths, years)."""
    return len(token) > 2 and token not in _STOP and not ("0" <= token[0] <= "9")


def terms(text: str) -> list[str]:
    """Lower-case ASCII word tokens of ``text`` that carry meaning (``meaningful``), in order,
    each once, at most 32.

    Only ``[a-z0-9]+`` survives, so a term is always safe inside a tsquery. The store's
    tsquery and the in-memory BM25 index both use these terms, so neither ever matches on a
    number, a time, a date or a one- or two-character token."""
    seen: dict[str, None] = {}
    for t in _TOKEN.findall(text.lower()):
        if meaningful(t) and t not in seen:
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


def _ago(at: datetime, now: datetime) -> str:
    days = max(0, int((now - at).total_seconds() // 86400))
    return "today" if days == 0 else "yesterday" if days == 1 else f"{days} days ago"


def _outcome(e: LibraryEntry, now: datetime) -> str:
    """What the stored plan's runs came to, counted per run (PlanWriter counts a run once,
    whatever its number of steps)."""
    runs = e.success_count + e.failure_count
    if runs == 0 or e.last_used_at is None:
        return f"was made {_ago(e.created_at, now)} and has not run"
    when = _ago(e.last_used_at, now)
    if runs == 1:
        return f"ran {when} and {'succeeded' if e.success_count else 'failed'}"
    return f"ran {runs} times, {e.success_count} of {runs} successfully, last {when}"


def why_line(c: Candidate, parts: Mapping[str, float], now: datetime) -> str:
    """The one sentence a person reads about a stored plan found for a request: which kind of
    plan, how its runs went, the meaningful words it shares with the request (not the intent's
    own name), and how similar it is, e.g. "A book visa slot plan like this one ran 2 days ago
    and succeeded; it shares lisbon, consulate with this request (similarity 0.81)."
    """
    e = c.entry
    what = e.intent.replace("_", " ").replace(".", " ")
    named = set(what.split())
    shared = [t for t in c.matched if t not in named][:5]
    line = f"A {what} plan like this one {_outcome(e, now)}"
    if shared:
        line += f"; it shares {', '.join(shared)} with this request"
    if c.cosine is not None:
        line += f" (similarity {max(0.0, c.cosine):.2f})"
    return (line + ".")[:256]


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
                similarity=None if c.cosine is None else round(max(0.0, min(1.0, c.cosine)), 4),
                matched=c.matched,
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
    value = {intent, score, similarity, matched, successes, failures, last_used_at}, why = the
    ranked plan's sentence, confidence = its similarity to the request (an absolute measure;
    the hybrid score only ranks one query's candidates: a lone candidate scores near 1
    whatever it matched). Without a vector, half the share of meaningful terms it matched."""
    out = []
    for r in ranked:
        e = r.entry
        confidence = r.similarity if r.similarity is not None else 0.5 * min(1.0, r.parts["bm25"])
        out.append(
            Evidence(
                type="exemplar",
                key=e.plan_id,
                value={
                    "intent": e.intent,
                    "score": r.score,
                    "similarity": r.similarity,
                    "matched": list(r.matched[:6]),
                    "successes": e.success_count,
                    "failures": e.failure_count,
                    "last_used_at": None if e.last_used_at is None else format_utc(e.last_used_at),
                },
                confidence=round(max(0.0, min(1.0, confidence)), 3),
                source_ref=f"plan_library:{e.plan_id}",
                why=r.why,
            )
        )
    return out
