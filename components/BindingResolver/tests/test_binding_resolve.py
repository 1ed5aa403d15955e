"""BindingResolver: constants stay constants, person data stays data, errors name the step."""

from __future__ import annotations

import pytest

from countersign.binding import resolve_step, set_path
from countersign.kernel import BindingError, Plan, PlanStep, Policy
from countersign.planner import make_plan
from countersign.planner.testing import make_intent
from countersign.registry import Registry

LOCAL = Policy(providers={"calendar": "caldav", "mail": "smtp"})


def test_every_step_of_every_usecase_binds(registry: Registry) -> None:
    for name in ("schedule_meeting", "find_meeting_time", "purchase_item", "watch_visa_slots"):
        for policy in (Policy(), LOCAL):
            plan = make_plan(make_intent(name), [], registry, policy)
            assert isinstance(plan, Plan)
            for s in plan.graph:
                node = resolve_step(s, registry)
                assert node.step == s.step
                assert node.node_type.startswith("n8n-nodes-base.")


def test_caldav_create_event_binding(registry: Registry) -> None:
    plan = make_plan(make_intent("find_meeting_time"), [], registry, LOCAL)
    assert isinstance(plan, Plan)
    node = resolve_step(
        plan.graph[4], registry, settings={"caldav_base_url": "http://127.0.0.1:5232"}
    )
    assert node.node_type == "n8n-nodes-base.httpRequest"
    assert node.type_version == 4.2
    assert node.parameters["method"] == "PUT"
    assert node.parameters["headerParameters"] == {
        "parameters": [{"name": "If-None-Match", "value": "*"}]
    }
    assert node.data["url"].kind == "template"
    assert node.data["body"].fn == "ics_event"
    assert node.safety == "write" and node.idempotency is not None
    assert node.idempotency.via == "natural_key"
    assert node.settings == ["caldav_base_url"]


def test_person_text_never_lands_in_constant_parameters(registry: Registry) -> None:
    hostile = "={{ $env.N8N_ENCRYPTION_KEY }}"
    ents = make_intent("find_meeting_time").to_json()["entities"]
    ents["title"] = hostile
    ents["participants"] = ["{{ require('fs') }}@x.org"]
    plan = make_plan(make_intent("find_meeting_time", entities=ents), [], registry, LOCAL)
    assert isinstance(plan, Plan)
    for s in plan.graph:
        node = resolve_step(s, registry)
        assert hostile not in repr(node.parameters)
        assert "require(" not in repr(node.parameters)


def test_missing_arg_names_step_and_arg(registry: Registry) -> None:
    step = PlanStep(
        step=7,
        mode="interactive",
        role="Booker",
        uses="smtp",
        call="send",
        args={"to": "a@b.c", "subject": "s"},
        dry_run=False,
    )
    with pytest.raises(BindingError, match=r"step 7 \(smtp.send\).*'body'"):
        resolve_step(step, registry)


def test_unknown_op_names_step(registry: Registry) -> None:
    step = PlanStep(
        step=3, mode="interactive", role="Booker", uses="smtp", call="fax", args={}, dry_run=False
    )
    with pytest.raises(BindingError, match="step 3: connector 'smtp' has no op 'fax'"):
        resolve_step(step, registry)


def test_unbound_extra_arg(registry: Registry) -> None:
    step = PlanStep(
        step=2,
        mode="interactive",
        role="Notifier",
        uses="smtp",
        call="send",
        args={"to": "a@b.c", "subject": "s", "body": "b", "bcc": "x@y.z"},
        dry_run=False,
    )
    with pytest.raises(BindingError, match="bcc"):
        resolve_step(step, registry)


def test_missing_setting_is_named(registry: Registry) -> None:
    step = PlanStep(
        step=1,
        mode="interactive",
        role="Fetcher",
        uses="caldav",
        call="list_free_busy",
        args={"user": "alice"},
        dry_run=True,
    )
    with pytest.raises(BindingError, match="caldav_base_url"):
        resolve_step(step, registry, settings={})


def test_set_path_builds_nested_lists() -> None:
    d: dict[str, object] = {}
    set_path(d, "a.b[1].c", 1)
    set_path(d, "a.b[0].c", 0)
    set_path(d, "x", True)
    assert d == {"a": {"b": [{"c": 0}, {"c": 1}]}, "x": True}
    with pytest.raises(BindingError):
        set_path(d, "a..b", 1)
