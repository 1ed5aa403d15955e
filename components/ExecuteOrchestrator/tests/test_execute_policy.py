"""The gate rules again at the write (ExecuteOrchestrator SPEC 3d, ``execute.policy``): the check
agrees with the plan made under the policy in force, refuses a write a rule added since gates (its
gate does not name it), and a write a deny rule matches on the value as sent (the chosen slot,
unknown when planning); each refusal is handed to the audit first."""

from __future__ import annotations

from typing import Any

import pytest

from countersign.execute import PolicyRefusedError
from countersign.execute.policy import check_policy
from countersign.kernel import DEFAULT_RULES, GateRule, Plan, Policy
from countersign.planner import make_plan
from countersign.planner.testing import make_intent
from countersign.registry import Registry


def _plan(registry: Registry, name: str, policy: Policy | None = None) -> Plan:
    p = make_plan(make_intent(name), [], registry, policy or Policy())
    assert isinstance(p, Plan), p
    return p


def _rule(**kw: Any) -> GateRule:
    return GateRule.model_validate({"then": "gate", "because": "b", **kw})


def _writes(plan: Plan, registry: Registry) -> list[int]:
    return [s.step for s in plan.graph if registry.op(s.uses, s.call).safety == "write"]


def test_the_executor_check_agrees_with_the_plan_and_refuses_stricter_rules(
    registry: Registry,
) -> None:
    plan = _plan(registry, "schedule_meeting")
    steps = _writes(plan, registry)
    choice = {"gate-A": {"start": "2026-11-23T22:00:00Z", "end": "2026-11-23T22:30:00Z"}}
    audited: list[tuple[str, int, str]] = []
    note = lambda why, step, op: audited.append((why, step, op))  # noqa: E731
    check_policy(plan, "gate-A", steps, {}, choice, policy=Policy(), refused=note)
    assert audited == []
    # a rule added since: the plan's gate does not name it
    added = Policy(rules=(*DEFAULT_RULES, _rule(id="night", op="*.create_event")))
    with pytest.raises(PolicyRefusedError, match="night"):
        check_policy(plan, "gate-A", steps, {}, choice, policy=added, refused=note)
    # a deny rule on the value as sent (the chosen start), unknown when planning
    night = _rule(
        id="no-night", op="*.create_event", then="deny", where={"start": {"matches": "*T22:*"}}
    )
    denied = Policy(rules=(*DEFAULT_RULES, night))
    with pytest.raises(PolicyRefusedError, match="no-night"):
        check_policy(plan, "gate-A", steps, {}, choice, policy=denied, refused=note)
    day = {"gate-A": {"start": "2026-11-23T14:00:00Z", "end": "2026-11-23T14:30:00Z"}}
    plan_denied = _plan(registry, "schedule_meeting", denied)  # planned under it: allowed by day
    check_policy(plan_denied, "gate-A", steps, {}, day, policy=denied, refused=note)
    assert audited[0][0].startswith("rule 'night' gates step")
    assert len(audited) == 2
