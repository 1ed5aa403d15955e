"""Evidence the planner consumes (issue 15.2): a preferred duration fills the entity, work hours
bound the window; without them the plan is as before; the evidence hash changes with them."""

from __future__ import annotations

from typing import Any

from countersign.kernel import Evidence, Plan, Policy
from countersign.planner import make_plan
from countersign.planner.testing import make_intent
from countersign.registry import Registry


def _pref(key: str, value: Any, confidence: float = 0.9) -> Evidence:
    return Evidence(
        type="preference", key=key, value=value, confidence=confidence, source_ref=f"pref:{key}"
    )


def _overlap(plan: Plan) -> dict[str, Any]:
    return next(s.args for s in plan.graph if s.call == "find_overlap")


def test_work_hours_bound_the_window_in_the_intents_zone(registry: Registry) -> None:
    intent = make_intent("schedule_meeting", tz="Europe/Lisbon")  # 13:00–18:00Z, UTC+0 in Nov
    plain = make_plan(intent, [], registry, Policy())
    hours = _pref("work_hours", {"start": "14:00", "end": "17:30"})
    bounded = make_plan(intent, [hours], registry, Policy())
    assert isinstance(plain, Plan) and isinstance(bounded, Plan)
    assert _overlap(plain)["window_start"] == "2026-11-23T13:00:00Z"
    assert _overlap(bounded)["window_start"] == "2026-11-23T14:00:00.000Z"
    assert _overlap(bounded)["window_end"] == "2026-11-23T17:30:00.000Z"
    assert plain.meta.evidence_hash != bounded.meta.evidence_hash
    freebusy = [s.args for s in bounded.graph if s.call == "list_free_busy"]
    assert {a["time_min"] for a in freebusy} == {"2026-11-23T14:00:00.000Z"}


def test_work_hours_that_leave_no_window_or_are_malformed_change_nothing(
    registry: Registry,
) -> None:
    intent = make_intent("schedule_meeting")
    plain = make_plan(intent, [], registry, Policy())
    assert isinstance(plain, Plan)
    for value in (
        {"start": "19:00", "end": "22:00"},
        {"start": "nine"},
        "9-5",
        {"start": "17:00", "end": "09:00"},
    ):
        p = make_plan(intent, [_pref("work_hours", value)], registry, Policy())
        assert isinstance(p, Plan)
        assert _overlap(p)["window_start"] == _overlap(plain)["window_start"], value
        assert _overlap(p)["window_end"] == _overlap(plain)["window_end"], value


def test_a_preferred_duration_fills_only_what_the_intent_left_open(registry: Registry) -> None:
    given = make_intent("schedule_meeting")
    entities = {k: v for k, v in given.entities.items() if k != "duration_min"}
    open_ = given.model_copy(update={"entities": entities})
    p = make_plan(open_, [_pref("duration_min", 45)], registry, Policy())
    assert isinstance(p, Plan) and _overlap(p)["duration_min"] == 45
    q = make_plan(given, [_pref("duration_min", 45)], registry, Policy())
    assert isinstance(q, Plan) and _overlap(q)["duration_min"] == 30
    low = make_plan(open_, [_pref("duration_min", 45, confidence=0.3)], registry, Policy())
    assert not isinstance(low, Plan)  # below min_evidence_confidence: asked for instead
