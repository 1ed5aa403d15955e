"""The Planner's entities (Planner LLD §1): each declared entity given by the intent, else the
most confident preference in the evidence, else the spec's default (which may name the Policy);
a required one still missing is a ``Need``. Values are type-checked; a ``work_hours`` preference
narrows a meeting window. Pure."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime, time
from typing import Any
from zoneinfo import ZoneInfo

from pydantic import JsonValue

from countersign.kernel import Evidence, Intent, Need, PlanningError, Policy, format_utc
from countersign.registry import EntitySpec, IntentSpec

__all__ = ["policy_value", "resolve_entities"]

_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def resolve_entities(
    spec: IntentSpec, intent: Intent, evidence: Sequence[Evidence], policy: Policy
) -> tuple[dict[str, JsonValue], list[Need]]:
    """The intent's entities, typed: given, else a confident preference, else the spec's default;
    a required one with none of these is a ``Need`` (Planner LLD §1)."""
    declared = {e.name: e for e in (*spec.required, *spec.optional)}
    unknown = sorted(set(intent.entities) - set(declared))
    if unknown:
        raise PlanningError(
            f"intent {spec.name!r} does not take entit{'y' if len(unknown) == 1 else 'ies'} "
            f"{', '.join(unknown)} (it takes: {', '.join(sorted(declared))})"
        )
    prefs = _preferences(evidence, policy)
    out: dict[str, JsonValue] = {}
    needs: list[Need] = []
    for e in spec.required:
        value = intent.entities.get(e.name, prefs.get(e.name))
        if value is None:
            needs.append(Need(entity=e.name, question=e.question))
            continue
        out[e.name] = _check_type(spec.name, e, value)
    for e in spec.optional:
        value = intent.entities.get(e.name, prefs.get(e.name))
        if value is None and e.default is not None:
            value = policy_value(e.default, policy, where=f"{spec.name}.{e.name}.default")
        if value is not None:
            out[e.name] = _check_type(spec.name, e, value)
    return _within_work_hours(out, prefs.get("work_hours"), intent.tz), needs


def _within_work_hours(
    entities: dict[str, JsonValue], hours: JsonValue, tz: str
) -> dict[str, JsonValue]:
    """A ``work_hours`` preference (``{"start": "09:00", "end": "17:00"}`` in the intent's zone)
    moves a ``window_start`` before the day's start to it and a ``window_end`` after the last
    day's end back to it (Planner SPEC §3). A malformed preference, or one that would leave no
    window, changes nothing; nights inside a multi-day window are not cut out."""
    start, end = entities.get("window_start"), entities.get("window_end")
    if not (isinstance(hours, Mapping) and isinstance(start, str) and isinstance(end, str)):
        return entities
    try:
        zone = ZoneInfo(tz)
        h0, h1 = time.fromisoformat(str(hours["start"])), time.fromisoformat(str(hours["end"]))
        s = datetime.fromisoformat(start.replace("Z", "+00:00")).astimezone(zone)
        e = datetime.fromisoformat(end.replace("Z", "+00:00")).astimezone(zone)
    except (KeyError, ValueError, TypeError):
        return entities
    lo = max(s, datetime.combine(s.date(), h0, zone))
    hi = min(e, datetime.combine(e.date(), h1, zone))
    if h0 >= h1 or lo >= hi:
        return entities
    out = dict(entities)
    if lo != s:
        out["window_start"] = format_utc(lo)
    if hi != e:
        out["window_end"] = format_utc(hi)
    return out


def _preferences(evidence: Sequence[Evidence], policy: Policy) -> dict[str, JsonValue]:
    """The most confident preference per key at or above the Policy's threshold."""
    best: dict[str, Evidence] = {}
    for ev in evidence:
        if ev.type != "preference" or ev.confidence < policy.min_evidence_confidence:
            continue
        cur = best.get(ev.key)
        if cur is None or (ev.confidence, ev.source_ref) > (cur.confidence, cur.source_ref):
            best[ev.key] = ev
    return {k: v.value for k, v in best.items()}


def _check_type(intent: str, e: EntitySpec, value: JsonValue) -> JsonValue:
    ok: bool
    match e.type:
        case "string":
            ok = isinstance(value, str) and value.strip() != ""
        case "integer":
            ok = isinstance(value, int) and not isinstance(value, bool)
        case "number":
            ok = isinstance(value, int | float) and not isinstance(value, bool)
        case "boolean":
            ok = isinstance(value, bool)
        case "email":
            ok = isinstance(value, str) and bool(_EMAIL.match(value))
        case "datetime":
            ok = isinstance(value, str) and _is_aware_iso(value)
        case "list":
            ok = isinstance(value, list) and len(value) > 0
    if not ok:
        raise PlanningError(
            f"intent {intent!r}: entity {e.name!r} must be {_TYPE_WORDS[e.type]}, got {value!r:.80}"
        )
    return value


_TYPE_WORDS = {
    "string": "a non-empty string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "email": "an e-mail address",
    "datetime": "an ISO 8601 date-time with a time zone",
    "list": "a non-empty list",
}


def _is_aware_iso(text: str) -> bool:
    try:
        return datetime.fromisoformat(text).tzinfo is not None
    except ValueError:
        return False


def policy_value(expr: JsonValue, policy: Policy, *, where: str) -> JsonValue:
    """``expr`` itself, or the Policy's value at ``$policy.<path>`` (``where`` names the
    registry place that wrote it, for the error)."""
    if not (isinstance(expr, str) and expr.startswith("$policy.")):
        return expr
    cur: Any = policy.to_json()
    for part in expr.removeprefix("$policy.").split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            raise PlanningError(f"{where}: {expr!r} names nothing in the Policy")
        cur = cur[part]
    return cur  # type: ignore[no-any-return]
