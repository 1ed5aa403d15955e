"""Gate placement, parallel structure, needs, and input errors."""

from __future__ import annotations

import pytest

from countersign.kernel import (
    Evidence,
    Needs,
    Plan,
    PlanningError,
    Policy,
    UnknownIntentError,
)
from countersign.planner import make_plan
from countersign.planner.testing import make_intent
from countersign.registry import Registry


def _plan(registry: Registry, name: str, policy: Policy | None = None, **kw: object) -> Plan:
    p = make_plan(make_intent(name, **kw), [], registry, policy or Policy())
    assert isinstance(p, Plan), p
    return p


def _ops(plan: Plan) -> list[tuple[int, str, list[int], str | None]]:
    return [(s.step, f"{s.uses}.{s.call}", s.after, s.gate_id) for s in plan.graph]


def test_every_write_runs_after_a_gate(registry: Registry) -> None:
    for name in ("schedule_meeting", "find_meeting_time", "purchase_item", "watch_visa_slots"):
        plan = _plan(registry, name)
        ancestors: dict[int, set[int]] = {}
        for s in plan.graph:
            ancestors[s.step] = set(s.after).union(*(ancestors[a] for a in s.after))
            op = registry.op(s.uses, s.call)
            if op.safety == "write":
                gates = [a for a in ancestors[s.step] if plan.step(a).gate_id]
                assert gates, f"{name}: write step {s.step} has no gate before it"
                assert not s.dry_run
            else:
                assert s.dry_run == (not op.gate)


def test_meeting_parallel_reads_then_overlap_then_gate(registry: Registry) -> None:
    plan = _plan(registry, "find_meeting_time")
    assert _ops(plan) == [
        (1, "google.calendar.list_free_busy", [], None),
        (2, "google.calendar.list_free_busy", [], None),
        (3, "system.analyze.find_overlap", [1, 2], None),
        (4, "system.approval.confirm", [3], "gate-A"),
        (5, "google.calendar.create_event", [4], None),
    ]
    assert plan.graph[4].args["start"] == {"$ref": "gates.gate-A.choice.start"}
    assert plan.graph[2].args["inputs"] == [{"$ref": "steps.1.output"}, {"$ref": "steps.2.output"}]
    assert plan.constraints.scopes == ["calendar.write"]
    assert plan.graph[0].role == "Fetcher" and plan.graph[2].role == "Analyzer"
    assert plan.graph[3].role == "Resolver" and plan.graph[4].role == "Booker"


def test_a_meeting_has_one_uid_in_every_calendar_and_a_key_per_write(registry: Registry) -> None:
    """``$step.uid`` is one per template: the event written into each participant's calendar is
    one meeting (one UID); the writes still differ (step, user), so each has its own idempotency
    key ``plan_id:step:arg_hash``."""
    plan = _plan(registry, "schedule_meeting")
    creates = [s for s in plan.graph if s.call == "create_event"]
    assert len(creates) == 2
    assert {s.args["uid"] for s in creates} == {f"{plan.plan_id.lower()}-{creates[0].step}"}
    assert {s.args["organizer"] for s in creates} == {plan.intent.user_id}
    assert creates[0].step != creates[1].step
    assert [s.args["user"] for s in creates] == plan.intent.entities["participants"]


def test_shopping_has_two_gates(registry: Registry) -> None:
    plan = _plan(registry, "purchase_item")
    assert _ops(plan) == [
        (1, "shop.sandbox.search", [], None),
        (2, "system.analyze.rank_offers", [1], None),
        (3, "system.approval.confirm", [2], "gate-A"),
        (4, "shop.sandbox.add_to_cart", [3], None),
        # the cart as the shop holds it after gate-A's write: what gate-B reviews
        (5, "shop.sandbox.view_cart", [4], None),
        (6, "system.approval.confirm", [5], "gate-B"),
        (7, "shop.sandbox.purchase", [6], None),
    ]
    assert plan.constraints.scopes == ["shopping.cart", "shopping.purchase"]


def test_optional_notification_joins_the_purchase_gate(registry: Registry) -> None:
    doc = make_intent("purchase_item").to_json()
    doc["entities"]["notify_to"] = "me@example.com"
    plan = make_plan(make_intent("purchase_item", entities=doc["entities"]), [], registry, Policy())
    assert isinstance(plan, Plan)
    assert _ops(plan)[-1] == (8, "gmail.send", [7], None)


def test_visa_watcher_is_durable(registry: Registry) -> None:
    plan = _plan(registry, "watch_visa_slots")
    assert [(s.mode, s.role) for s in plan.graph] == [
        ("durable", "Watcher"),
        ("durable", "Resolver"),
        ("durable", "Booker"),
    ]
    assert plan.graph[0].args["poll_interval_s"] == Policy().watcher_defaults["poll_interval_s"]
    assert (
        plan.constraints.ttl_s == Policy().plan_ttl_s + Policy().watcher_defaults["max_lifetime_s"]
    )


def test_per_write_policy_gates_each_write(registry: Registry) -> None:
    plan = _plan(registry, "schedule_meeting", policy=Policy(gating="per_write"))
    gates = [s.gate_id for s in plan.graph if s.gate_id]
    assert gates == ["gate-A", "gate-B", "gate-C", "gate-D"]


def test_policy_picks_calendar_provider(registry: Registry) -> None:
    local = Policy(providers={"calendar": "caldav", "mail": "smtp"})
    plan = _plan(registry, "schedule_meeting", policy=local)
    assert {s.uses for s in plan.graph} == {"caldav", "system.analyze", "system.approval", "smtp"}


def test_missing_entities_give_needs(registry: Registry) -> None:
    intent = make_intent("schedule_meeting", entities={"participants": ["a@b.com"]})
    out = make_plan(intent, [], registry, Policy())
    assert isinstance(out, Needs)
    assert [n.entity for n in out.needs] == ["duration_min", "window_start", "window_end", "title"]
    assert all(n.question.endswith("?") for n in out.needs)


def test_confident_preference_fills_an_entity(registry: Registry) -> None:
    ents = make_intent().to_json()["entities"]
    del ents["duration_min"]
    intent = make_intent(entities=ents)
    pref = Evidence(
        type="preference", key="duration_min", value=45, confidence=0.9, source_ref="kv:p"
    )
    weak = Evidence(
        type="preference", key="duration_min", value=15, confidence=0.2, source_ref="kv:q"
    )
    plan = make_plan(intent, [weak, pref], registry, Policy())
    assert isinstance(plan, Plan)
    assert plan.graph[2].args["duration_min"] == 45
    only_weak = make_plan(intent, [weak], registry, Policy())
    assert isinstance(only_weak, Needs)


def test_unknown_intent_lists_known_ones(registry: Registry) -> None:
    with pytest.raises(UnknownIntentError, match="schedule_meeting") as info:
        make_plan(make_intent(intent="order_pizza"), [], registry, Policy())
    assert info.value.known == registry.intent_names()


@pytest.mark.parametrize(
    ("entity", "value", "words"),
    [
        ("duration_min", "30", "an integer"),
        ("duration_min", True, "an integer"),
        ("participants", [], "a non-empty list"),
        ("window_start", "tomorrow", "ISO 8601"),
        ("window_start", "2026-11-23T13:00:00", "ISO 8601"),
        ("title", "  ", "non-empty string"),
    ],
)
def test_bad_entity_types_are_named(
    registry: Registry, entity: str, value: object, words: str
) -> None:
    ents = make_intent().to_json()["entities"]
    ents[entity] = value
    with pytest.raises(PlanningError, match=entity) as info:
        make_plan(make_intent(entities=ents), [], registry, Policy())
    assert words in info.value.message


def test_unknown_entity_is_refused(registry: Registry) -> None:
    ents = {**make_intent().to_json()["entities"], "colour": "blue"}
    with pytest.raises(PlanningError, match="colour"):
        make_plan(make_intent(entities=ents), [], registry, Policy())
