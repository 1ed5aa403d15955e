"""The gate rules as a table (issue 26, Tests): plans of the three use cases (and variants with
other arguments: more participants, other recipients, prices, consulates) × rule sets (tests on
constants, on references, and on the person's facts: ``self`` and ``contacts``) → exactly which
gate carries which rule ids for which steps, or the deny rule that makes no plan.

Each row is checked three ways: the Planner's ``because`` on every gate is exactly the row's;
the write check at execute (``steps.policy_refusal``, the one both runtimes call) passes the plan
with the same facts; and the plan with one required reason dropped from its gate is refused at
the write that reason is about (a plan signed with a gate's reason dropped)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from countersign.kernel import (
    DEFAULT_RULES,
    GateRule,
    Plan,
    PlanningError,
    Policy,
)
from countersign.kernel.rules import person_facts
from countersign.planner import make_plan
from countersign.planner.facts import contact_evidence
from countersign.planner.testing import make_intent
from countersign.registry import Registry
from countersign.steps import policy_refusal

ME, BOB, CAROL, DAVE = "alice@example.com", "bob@example.com", "carol@example.com", "dave@x.org"


def _r(rid: str, op: str, then: str = "gate", **where: Any) -> dict[str, Any]:
    return {"id": rid, "op": op, "then": then, "because": rid, "where": where}


#: the rules the rows combine (the default rules are DEFAULT_RULES)
R: dict[str, dict[str, Any]] = {
    "outside": _r("mail-outside", "*.send", to={"not_in_set": ["contacts", "self"]}),
    "not-contact": _r("mail-not-contact", "*.send", to={"not_in_set": "contacts"}),
    "others-cal": _r("others-calendar", "*.create_event", user={"not_in_set": "self"}),
    "own-cal": _r("own-calendar", "*.create_event", user={"in_set": "self"}),
    "guests": _r(
        "guests-outside", "*.create_event", attendees={"not_in_set": ["contacts", "self"]}
    ),
    "vips": _r("to-vips", "*.send", to={"in_set": "vips"}),
    "deny-outside": _r(
        "no-mail-outside", "*.send", "deny", to={"not_in_set": ["contacts", "self"]}
    ),
    "deny-gmail": _r("no-gmail", "gmail.send", "deny"),
    "over-20": _r("over-20", "*.purchase", max_total={"gt": 20}),
    "le-20": _r("le-20", "*.purchase", max_total={"le": 20}),
    "many": _r("many", "*.add_to_cart", quantity={"ge": 3}),
    "own-cart": _r("own-cart", "*.add_to_cart", customer={"in_set": "self"}),
    "lisbon": _r("lisbon", "visa.*", consulate={"eq": "lisbon"}),
    "not-lisbon": _r("not-lisbon", "visa.*", consulate={"ne": "lisbon"}),
    "slot": _r("slot-early", "*.book_slot", slot={"matches": "*T08:*"}),
    "to-bob": _r("to-bob", "*.send", to={"in": [BOB]}),
    "example": _r("example-domain", "*.send", to={"matches": "*@example.com"}),
    "deny-later": _r("no-night", "*.create_event", "deny", start={"matches": "*T22:*"}),
}


@dataclass(frozen=True)
class Row:
    intent: str
    rules: tuple[str, ...]
    #: gate id → rule id → the steps it is about; or the deny rule that makes no plan
    gates: dict[str, dict[str, list[int]]] | str
    entities: dict[str, Any] = field(default_factory=dict)
    contacts: tuple[str, ...] = ()
    defaults: bool = True


MEET = "schedule_meeting"
FIND = "find_meeting_time"
BUY = "purchase_item"
VISA = "watch_visa_slots"
DEF_MEET = {"calendar-write": [5, 6], "mail-send": [7, 8]}
THREE = {"participants": [ME, BOB, CAROL]}
DEF_THREE = {"calendar-write": [6, 7, 8], "mail-send": [9, 10, 11]}

ROWS: dict[str, Row] = {
    # the use cases under the default rules
    "meeting-default": Row(MEET, (), {"gate-A": DEF_MEET}),
    "find-default": Row(FIND, (), {"gate-A": {"calendar-write": [5]}}),
    "buy-default": Row(BUY, (), {"gate-A": {"cart-change": [4]}, "gate-B": {"purchase": [7]}}),
    "buy-notify": Row(
        BUY,
        (),
        {"gate-A": {"cart-change": [4]}, "gate-B": {"mail-send": [8], "purchase": [7]}},
        {"notify_to": ME},
    ),
    "buy-over-100": Row(
        BUY,
        (),
        {
            "gate-A": {"cart-change": [4]},
            "gate-B": {"purchase": [7], "purchase-over-100": [7]},
        },
        {"max_price": "150.00"},
    ),
    "visa-default": Row(VISA, (), {"gate-A": {"appointment": [3]}}),
    "visa-notify": Row(
        VISA, (), {"gate-A": {"mail-send": [4], "appointment": [3]}}, {"notify_to": ME}
    ),
    "no-rules": Row(MEET, (), {"gate-A": {}}, defaults=False),
    # mail outside the contacts (self and contacts are inside)
    "outside-bob-unknown": Row(MEET, ("outside",), {"gate-A": {**DEF_MEET, "mail-outside": [8]}}),
    "outside-bob-contact": Row(MEET, ("outside",), {"gate-A": DEF_MEET}, contacts=(BOB,)),
    "outside-bob-contact-case": Row(
        MEET, ("outside",), {"gate-A": DEF_MEET}, contacts=("Bob@Example.COM",)
    ),
    "outside-three-one-contact": Row(
        MEET, ("outside",), {"gate-A": {**DEF_THREE, "mail-outside": [11]}}, THREE, (BOB,)
    ),
    "outside-three-all-contacts": Row(
        MEET, ("outside",), {"gate-A": DEF_THREE}, THREE, (BOB, CAROL)
    ),
    "not-contact-self-too": Row(
        MEET, ("not-contact",), {"gate-A": {**DEF_MEET, "mail-not-contact": [7]}}, contacts=(BOB,)
    ),
    "outside-buy-notify-self": Row(
        BUY,
        ("outside",),
        {"gate-A": {"cart-change": [4]}, "gate-B": {"mail-send": [8], "purchase": [7]}},
        {"notify_to": ME},
    ),
    "outside-visa-notify-stranger": Row(
        VISA,
        ("outside",),
        {"gate-A": {"mail-send": [4], "appointment": [3], "mail-outside": [4]}},
        {"notify_to": DAVE},
    ),
    "outside-visa-notify-contact": Row(
        VISA,
        ("outside",),
        {"gate-A": {"mail-send": [4], "appointment": [3]}},
        {"notify_to": DAVE},
        (DAVE,),
    ),
    # someone else's calendar (the consent of its owner is not asked: one approver)
    "others-calendar": Row(
        MEET, ("others-cal",), {"gate-A": {**DEF_MEET, "others-calendar": [6]}}, contacts=(BOB,)
    ),
    "others-calendar-three": Row(
        MEET, ("others-cal",), {"gate-A": {**DEF_THREE, "others-calendar": [7, 8]}}, THREE
    ),
    "own-calendar": Row(MEET, ("own-cal",), {"gate-A": {**DEF_MEET, "own-calendar": [5]}}),
    "find-own-calendar-only": Row(FIND, ("others-cal",), {"gate-A": {"calendar-write": [5]}}),
    # a list-valued argument: ANY attendee outside is enough
    "guests-bob-stranger": Row(
        MEET, ("guests",), {"gate-A": {**DEF_MEET, "guests-outside": [5, 6]}}
    ),
    "guests-all-known": Row(MEET, ("guests",), {"gate-A": DEF_MEET}, contacts=(BOB,)),
    "guests-one-of-three": Row(
        MEET, ("guests",), {"gate-A": {**DEF_THREE, "guests-outside": [6, 7, 8]}}, THREE, (CAROL,)
    ),
    # a set the Planner is not given: unknown, the gate rule applies
    "vips-unknown": Row(MEET, ("vips",), {"gate-A": {**DEF_MEET, "to-vips": [7, 8]}}),
    # deny rules
    "deny-outside-stranger": Row(MEET, ("deny-outside",), "no-mail-outside"),
    "deny-outside-contacts": Row(MEET, ("deny-outside",), {"gate-A": DEF_MEET}, contacts=(BOB,)),
    "deny-gmail-meeting": Row(MEET, ("deny-gmail",), "no-gmail"),
    "deny-gmail-no-mail": Row(
        BUY, ("deny-gmail",), {"gate-A": {"cart-change": [4]}, "gate-B": {"purchase": [7]}}
    ),
    "deny-later-waits": Row(MEET, ("deny-later",), {"gate-A": DEF_MEET}),
    # tests on constants
    "over-20-no": Row(
        BUY, ("over-20",), {"gate-A": {"cart-change": [4]}, "gate-B": {"purchase": [7]}}
    ),
    "over-20-yes": Row(
        BUY,
        ("over-20", "le-20"),
        {"gate-A": {"cart-change": [4]}, "gate-B": {"purchase": [7], "over-20": [7]}},
        {"max_price": "30.00"},
    ),
    "le-20": Row(
        BUY,
        ("over-20", "le-20"),
        {"gate-A": {"cart-change": [4]}, "gate-B": {"purchase": [7], "le-20": [7]}},
    ),
    "many-and-own-cart": Row(
        BUY,
        ("many", "own-cart"),
        {
            "gate-A": {"cart-change": [4], "many": [4], "own-cart": [4]},
            "gate-B": {"purchase": [7]},
        },
        {"quantity": 5},
    ),
    "few": Row(BUY, ("many",), {"gate-A": {"cart-change": [4]}, "gate-B": {"purchase": [7]}}),
    "lisbon": Row(VISA, ("lisbon", "not-lisbon"), {"gate-A": {"appointment": [3], "lisbon": [3]}}),
    "porto": Row(
        VISA,
        ("lisbon", "not-lisbon"),
        {"gate-A": {"appointment": [3], "not-lisbon": [3]}},
        {"consulate": "porto"},
    ),
    "slot-is-a-reference": Row(
        VISA, ("slot",), {"gate-A": {"appointment": [3], "slot-early": [3]}}
    ),
    "to-bob-in": Row(MEET, ("to-bob",), {"gate-A": {**DEF_MEET, "to-bob": [8]}}),
    "example-domain": Row(
        MEET, ("example",), {"gate-A": {**DEF_MEET, "example-domain": [7, 8]}}, contacts=(BOB,)
    ),
    "rules-only-sets": Row(
        MEET,
        ("outside", "others-cal"),
        {"gate-A": {"mail-outside": [8], "others-calendar": [6]}},
        defaults=False,
    ),
}


def _policy(row: Row) -> Policy:
    rules = [GateRule.model_validate(R[k]) for k in row.rules]
    return Policy(rules=(*(DEFAULT_RULES if row.defaults else ()), *rules))


def _made(registry: Registry, row: Row) -> Plan:
    base = make_intent(row.intent)
    intent = make_intent(row.intent, user_id=ME, entities={**base.entities, **row.entities})
    out = make_plan(intent, contact_evidence(row.contacts), registry, _policy(row))
    assert isinstance(out, Plan), out
    return out


def _reasons(plan: Plan) -> dict[str, dict[str, list[int]]]:
    out: dict[str, dict[str, list[int]]] = {}
    for g in (s for s in plan.graph if s.gate_id):
        because: Any = g.args.get("because", [])
        out[str(g.gate_id)] = {b["rule"]: b["steps"] for b in because}
    return out


def test_the_table_is_big_enough() -> None:
    assert len(ROWS) >= 30
    assert {r.intent for r in ROWS.values()} == {MEET, FIND, BUY, VISA}


@pytest.mark.parametrize("name", sorted(ROWS))
def test_plan_times_rules_gives_exactly_these_gates(registry: Registry, name: str) -> None:
    row = ROWS[name]
    if isinstance(row.gates, str):
        with pytest.raises(PlanningError, match=row.gates):
            _made(registry, row)
        return
    plan = _made(registry, row)
    got = _reasons(plan)
    assert got == row.gates
    # in the policy's order on each gate (the card reads them in that order)
    order = [r.id for r in _policy(row).rules]
    for reasons in got.values():
        assert list(reasons) == sorted(reasons, key=order.index)


@pytest.mark.parametrize("name", sorted(n for n, r in ROWS.items() if not isinstance(r.gates, str)))
def test_the_write_check_agrees_and_refuses_a_dropped_reason(registry: Registry, name: str) -> None:
    row = ROWS[name]
    plan, policy = _made(registry, row), _policy(row)
    facts = person_facts(ME, row.contacts)
    writes = [s for s in plan.graph if registry.op(s.uses, s.call).safety == "write"]
    for s in writes:
        assert policy_refusal(plan, s, s.args, policy, facts=facts) is None, s.step
    assert isinstance(row.gates, dict)
    for gate, reasons in row.gates.items():
        for rule, steps in reasons.items():
            dropped = _drop(plan, gate, rule)
            why = policy_refusal(
                dropped, dropped.step(steps[0]), dropped.step(steps[0]).args, policy, facts=facts
            )
            assert why is not None and f"rule {rule!r} gates step {steps[0]}" in why


def _drop(plan: Plan, gate: str, rule: str) -> Plan:
    """The plan with ``rule`` taken off ``gate``'s reasons (as a plan signed that way)."""
    graph = []
    for s in plan.graph:
        because: Any = s.args.get("because", [])
        kept = [b for b in because if b["rule"] != rule]
        edited = {**s.args, "because": kept}
        graph.append(s.model_copy(update={"args": edited}) if s.gate_id == gate else s)
    return plan.model_copy(update={"graph": graph})
