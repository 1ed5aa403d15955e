"""Gate rules in the plan (Planner SPEC, GLOBAL_SPEC §9): every gate says why it is there (the
policy's rules its writes match, with their steps); a deny rule makes no plan; a rule on an
argument the plan only knows later (a reference) is on the gate."""

from __future__ import annotations

from typing import Any

import pytest

from countersign.kernel import DEFAULT_RULES, GateRule, Plan, PlanningError, Policy
from countersign.planner import make_plan
from countersign.planner.testing import make_intent
from countersign.registry import Registry

NAMES = ("schedule_meeting", "find_meeting_time", "purchase_item", "watch_visa_slots")


def _plan(registry: Registry, name: str, policy: Policy | None = None) -> Plan:
    p = make_plan(make_intent(name), [], registry, policy or Policy())
    assert isinstance(p, Plan), p
    return p


def _rule(**kw: Any) -> GateRule:
    return GateRule.model_validate({"then": "gate", "because": "b", **kw})


@pytest.mark.parametrize("name", NAMES)
def test_every_gate_says_why_for_each_write_it_guards(registry: Registry, name: str) -> None:
    plan = _plan(registry, name)
    writes = {s.step for s in plan.graph if registry.op(s.uses, s.call).safety == "write"}
    explained: set[int] = set()
    for g in (s for s in plan.graph if s.gate_id):
        because: Any = g.args.get("because")
        assert isinstance(because, list) and because, f"{name} {g.gate_id} says no reason"
        for b in because:
            assert b["because"] and b["rule"] in {r.id for r in DEFAULT_RULES}
            explained.update(b["steps"])
    assert explained == writes, f"{name}: writes without a reason on their gate"


def test_a_deny_rule_makes_no_plan(registry: Registry) -> None:
    policy = Policy(rules=(*DEFAULT_RULES, _rule(id="no-mail", op="*.send", then="deny")))
    with pytest.raises(PlanningError, match="no-mail"):
        make_plan(make_intent("schedule_meeting"), [], registry, policy)


def test_a_rule_on_a_later_value_is_on_the_gate(registry: Registry) -> None:
    # the slot is the person's choice at the gate: unknown when planning, so the rule is named
    strict = _rule(id="late", op="*.create_event", where={"start": {"matches": "*T22:*"}})
    plan = _plan(registry, "schedule_meeting", Policy(rules=(strict,)))
    (gate,) = [s for s in plan.graph if s.gate_id]
    reasons: Any = gate.args["because"]
    assert [b["rule"] for b in reasons] == ["late"]


def test_no_rule_no_reason(registry: Registry) -> None:
    plan = _plan(registry, "schedule_meeting", Policy(rules=()))
    assert all("because" not in s.args for s in plan.graph if s.gate_id)
