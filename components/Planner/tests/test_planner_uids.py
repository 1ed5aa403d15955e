"""``$steps.<template>.uid`` (Planner SPEC 7): a step names the uid of an earlier template it runs
after — a meeting's invitations carry the one UID the create steps write; anything else refuses."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from countersign.kernel import Plan, PlanningError, Policy
from countersign.planner import make_plan
from countersign.planner.testing import make_intent
from countersign.registry import Registry
from countersign.registry.models import IntentSpec


def test_invitations_carry_the_uid_the_calendars_get(registry: Registry) -> None:
    plan = make_plan(make_intent("schedule_meeting"), [], registry, Policy())
    assert isinstance(plan, Plan)
    creates = [s for s in plan.graph if s.call == "create_event"]
    mails = [s for s in plan.graph if s.call == "send"]
    assert len(creates) == 2 and len(mails) == 2
    uid = creates[0].args["uid"]
    assert {s.args["uid"] for s in creates} == {uid}
    events: list[Any] = [m.args["event"] for m in mails]
    assert all(e["uid"] == uid for e in events)
    assert all(e["start"] == {"$ref": "gates.gate-A.choice.start"} for e in events)


@pytest.mark.parametrize(
    ("uid", "why"),
    [("$steps.nothing.uid", "names no step template"), ("$steps.notify.uid", "runs after")],
)
def test_a_uid_of_no_template_or_a_later_one_refuses(
    registry: Registry, uid: str, why: str
) -> None:
    spec = registry.intents["schedule_meeting"]
    raw = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    for t in raw["steps"]:
        if t["id"] == "create":
            t["args"]["uid"] = uid
    intents = {**registry.intents, "schedule_meeting": IntentSpec.model_validate(raw)}
    changed = replace(registry, intents=intents)
    with pytest.raises(PlanningError, match=why):
        make_plan(make_intent("schedule_meeting"), [], changed, Policy())
