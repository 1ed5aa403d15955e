"""Evidence selection (pure: items in, evidence out; no I/O, no clock — ``now`` is an argument).

GLOBAL_SPEC §3 and ContextRAG SPEC §2: keep the items whose tier the Intent's
``context_budget`` allows (T1 = 1 … T5 = 5), T5 only under a granted consent purpose, none past
its ``ttl_days``, none the person dropped; re-rank by confidence × tier weight × recency, plus
relevance to the intent; keep the best item per (type, key); emit typed ``Evidence`` while the
list's canonical JSON stays within ``max_bytes`` (2 KB).
"""

from __future__ import annotations

import heapq
import json
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from pydantic import JsonValue, ValidationError

from countersign.kernel import Evidence, canonical_bytes

from .models import MemoryItem, Tier
from .sentences import fact_why, history_why, pattern_why, pref_why

__all__ = [
    "MAX_EVIDENCE_BYTES",
    "PREF_ALIASES",
    "PREF_BOUNDS",
    "TIER_RANK",
    "history_items",
    "pref_items",
    "relevant_items",
    "select_evidence",
]

MAX_EVIDENCE_BYTES = 2048
TIER_RANK: dict[Tier, int] = {"T1": 1, "T2": 2, "T3": 3, "T4": 4, "T5": 5}
_TIER_WEIGHT: dict[Tier, float] = {"T1": 1.0, "T2": 0.95, "T3": 0.8, "T4": 0.9, "T5": 0.7}
#: profile preference names → the intent entity they fill (a preference may also be keyed by
#: the entity's own name)
PREF_ALIASES: dict[str, str] = {
    "default_meeting_length": "duration_min",
    "meeting_length_min": "duration_min",
    "budget_limit": "max_price",
    "default_quantity": "quantity",
    "receipt_email": "notify_to",
}
#: preferences the Planner reads that fill no entity but bound some (Planner SPEC §3: work
#: hours move a window's ends): relevant to an intent that takes one of those entities
PREF_BOUNDS: dict[str, tuple[str, ...]] = {"work_hours": ("window_start", "window_end")}
#: the smallest an evidence item's JSON can be, and how many items that do not fit are tried
_SMALLEST = 80
_MAX_MISSES = 16
_NO_BRACES = str.maketrans("{}", "()")
#: at most this many candidates are ranked closely (the 2 KB cap holds ~20 items at most)
_POOL = 64


def pref_items(prefs: Mapping[str, tuple[JsonValue, datetime]]) -> list[MemoryItem]:
    """T2 items from the profile's preferences (``key → (value, updated_at)``)."""
    out = []
    for key, (value, at) in prefs.items():
        out.append(
            MemoryItem(
                "T2",
                "preference",
                PREF_ALIASES.get(key, key),
                value,
                0.9,
                f"pref:{key}",
                at,
                why=pref_why(key, value, at),
            )
        )
    return out


_SUCCEEDED = ("created", "updated", "ok", "succeeded", "completed")


_FAILED = ("failed", "error", "cancelled")


def _runs_of(rows: Sequence[Mapping[str, Any]], intent: str) -> dict[str, dict[str, list[Any]]]:
    """key → plan id → [newest value, its time, whether any of the run's rows failed], runs
    newest first (rows come newest first)."""
    runs: dict[str, dict[str, list[Any]]] = defaultdict(dict)
    for r in rows:
        if r["intent"] != intent:
            continue
        run = runs[str(r["key"])].setdefault(
            str(r["plan_id"]), [r["value"], r["created_at"], False]
        )
        run[2] = run[2] or r["status"] in _FAILED
    return runs


def _pattern(intent: str, key: str, rows: Sequence[Mapping[str, Any]]) -> MemoryItem | None:
    """The value most of the successful runs took for ``key`` (each run's newest row)."""
    by_run: dict[str, str] = {}
    values: dict[str, JsonValue] = {}
    newest: datetime | None = None
    for r in rows:
        if r["intent"] != intent or str(r["key"]) != key or r["status"] not in _SUCCEEDED:
            continue
        # an equality key for counting (cheaper than canonical bytes; same value, same key)
        b = json.dumps(r["value"], sort_keys=True, separators=(",", ":"))
        by_run.setdefault(str(r["plan_id"]), b)
        values[b] = r["value"]
        newest = newest or r["created_at"]
    if newest is None:
        return None
    total = len(by_run)
    b, n = Counter(by_run.values()).most_common(1)[0]
    confidence = round(n / total * min(1.0, total / 5), 3)
    return MemoryItem(
        "T3",
        "preference",
        key,
        values[b],
        confidence,
        f"pattern:{intent}:{key}",
        newest,
        why=pattern_why(key, values[b], n, total, intent),
    )


def history_items(rows: Sequence[Mapping[str, Any]], intent: str) -> list[MemoryItem]:
    """T3 items from outcome history rows (``plan_id, step, intent, key, value, status,
    created_at``, newest first), counted per **run** (one plan, whatever its number of steps):

    - per key, one ``history`` item: the newest run's value, and how the recent runs went
      ("3 of your last 4 schedule meeting runs succeeded; the latest, on 24 Nov 2026, ran
      caldav.create_event.") — a run failed when any of its rows did;
    - patterns: a value this intent took in most past successful runs becomes a ``preference``
      with confidence = its share of those runs, discounted while there are fewer than five.
    """
    out: list[MemoryItem] = []
    for key, by_run in _runs_of(rows, intent).items():
        value, at, _ = next(iter(by_run.values()))
        ok = sum(not failed for _, _, failed in by_run.values())
        out.append(
            MemoryItem(
                "T3",
                "history",
                f"{intent}.{key}",
                value,
                0.6,
                f"history:{intent}:{key}",
                at,
                why=history_why(intent, key, value, ok, len(by_run), at),
            )
        )
        pattern = _pattern(intent, key, rows)
        if pattern is not None:
            out.append(pattern)
    return out


def _strings(value: JsonValue) -> Iterable[str]:
    if isinstance(value, str):
        yield value.casefold()
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)


def _named(item: MemoryItem, said: Collection[str]) -> bool:
    """True when the intent's entity values name this contact: its e-mail (or another of its
    strings) is one of them, or its name is a word of one."""
    name = item.key.casefold()
    own = set(_strings(item.value)) - {name}
    if own & set(said):
        return True
    return any(name == s or f" {name} " in f" {s} " for s in said)


def relevant_items(
    items: Iterable[MemoryItem],
    *,
    intent: str,
    names: Collection[str],
    entities: Mapping[str, JsonValue],
) -> list[MemoryItem]:
    """Only the items that are evidence for this intent (ContextRAG SPEC §2), decided from
    data, per kind:

    - ``preference``: its key names one of the intent's entities (``names``: the registry's
      entities of the intent, and those the intent gives), or it bounds one (``PREF_BOUNDS``) —
      the only preferences the planner can use;
    - ``contact``: the intent's entity values name it (its e-mail, or its name as a word);
    - ``history`` / ``plan``: its key is the intent's (``<intent>.…``) or names an entity;
    - ``exemplar``: a stored plan of this same intent (``value.intent``).
    """
    said = [s for v in entities.values() for s in _strings(v)]
    keep = []
    for it in items:
        if it.type == "preference":
            ok = it.key in names or any(n in names for n in PREF_BOUNDS.get(it.key, ()))
        elif it.type == "contact":
            ok = _named(it, said)
        elif it.type == "exemplar":
            ok = isinstance(it.value, dict) and it.value.get("intent") == intent
        else:
            ok = it.key.startswith(f"{intent}.") or it.key in names
        if ok:
            keep.append(it)
    return keep


def _expired(item: MemoryItem, now: datetime) -> bool:
    return item.ttl_days is not None and item.created_at + timedelta(days=item.ttl_days) <= now


def _score(item: MemoryItem, now: datetime, relevant: Collection[str]) -> float:
    age_days = max(0.0, (now - item.created_at).total_seconds() / 86400)
    recency = 1.0 if item.tier == "T2" else 1.0 / (1.0 + age_days / 30)
    bonus = 0.5 if item.key in relevant else 0.0
    return item.confidence * _TIER_WEIGHT[item.tier] * recency + bonus


def _allowed(
    it: MemoryItem,
    budget: int,
    now: datetime,
    consents: Collection[str],
    exclude: Collection[str],
) -> bool:
    """Within the budget's tiers, not dropped, not expired; a T5 item only with its consent."""
    if TIER_RANK[it.tier] > budget or it.source_ref in exclude or _expired(it, now):
        return False
    return not (it.tier == "T5" and (it.purpose is None or it.purpose not in consents))


def _measured(it: MemoryItem) -> tuple[Evidence, int] | None:
    """The item as Evidence with its canonical size, or None when the contract refuses it."""
    said = it.why or fact_why(it.type, it.key, it.value, it.created_at, it.purpose)
    # words, never JSON: a brace a person typed into a key or a name reads as a parenthesis
    why = " ".join(said.translate(_NO_BRACES).split())
    try:
        ev = Evidence(
            type=it.type,
            key=it.key[:128],
            value=it.value,
            confidence=it.confidence,
            source_ref=it.source_ref[:256],
            ttl_days=it.ttl_days,
            why=why if len(why) <= 300 else why[:299] + "…",
        )
        return ev, len(canonical_bytes(ev.to_json()))
    except (ValidationError, ValueError):
        return None


def select_evidence(
    items: Iterable[MemoryItem],
    *,
    budget: int,
    now: datetime,
    consents: Collection[str],
    exclude: Collection[str] = (),
    relevant: Collection[str] = (),
    max_bytes: int = MAX_EVIDENCE_BYTES,
) -> list[Evidence]:
    """The evidence for one Intent.

    Args:
        items: candidates from every tier (any number; order does not matter).
        budget: the Intent's ``context_budget`` (the highest tier allowed, 0 = none).
        now: the Intent's ``received_at`` (expiry and recency are measured from it).
        consents: the purposes the person has granted; a T5 item needs its purpose here.
        exclude: ``source_ref``s the person dropped from an earlier plan.
        relevant: keys that matter to this intent (its entities), ranked first.
        max_bytes: the cap on the canonical JSON of the returned list.

    Returns:
        Evidence items, best first, whose canonical JSON list is at most ``max_bytes``.
    """
    scored: list[tuple[float, str, int, MemoryItem]] = []
    for i, it in enumerate(items):
        if _allowed(it, budget, now, consents, exclude):
            scored.append((_score(it, now, relevant), it.source_ref, i, it))
    best = heapq.nsmallest(_POOL * 4, scored, key=lambda s: (-s[0], s[1]))
    out: list[Evidence] = []
    taken: set[tuple[str, str]] = set()
    size = 2  # "[" and "]"
    misses = 0
    for _, _, _, it in best:
        if (it.type, it.key) in taken:
            continue
        measured = _measured(it)
        if measured is None:
            continue  # a stored value the contract refuses is never evidence
        ev, n = measured
        extra = n + (1 if out else 0)
        if size + extra > max_bytes:
            misses += 1
            if misses >= _MAX_MISSES or max_bytes - size < _SMALLEST:
                break  # nothing much smaller is coming: stop measuring (each costs ~0.1 ms)
            continue
        size += extra
        taken.add((it.type, it.key))
        out.append(ev)
        if len(out) >= _POOL:
            break
    return out
