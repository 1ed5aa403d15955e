"""Pure execute decisions: gate per write, reads per write, staleness, compensations."""

from __future__ import annotations

from typing import Any

from countersign.execute.core import stale_changes, write_specs
from countersign.kernel import Plan, Policy, content_hash
from countersign.planner import make_plan
from countersign.planner.testing import make_intent
from countersign.registry import Registry
from countersign.steps import compensation_steps, idempotency_key

LOCAL = Policy(providers={"calendar": "caldav", "mail": "smtp", "chat": "slack"})


def _plan(registry: Registry, name: str) -> Plan:
    p = make_plan(make_intent(name), [], registry, LOCAL)
    assert isinstance(p, Plan)
    return p


def test_write_specs_meeting(registry: Registry) -> None:
    specs = write_specs(_plan(registry, "schedule_meeting"), registry)
    assert [(w.step, w.gate_id, w.reads) for w in specs] == [
        (5, "gate-A", (1, 2, 3)),  # the event in each participant's calendar
        (6, "gate-A", (1, 2, 3)),
        (7, "gate-A", (1, 2, 3)),  # a mail to each participant
        (8, "gate-A", (1, 2, 3)),
    ]


def test_write_specs_shopping_two_gates(registry: Registry) -> None:
    specs = write_specs(_plan(registry, "purchase_item"), registry)
    assert [(w.step, w.gate_id) for w in specs] == [(4, "gate-A"), (7, "gate-B")]


def test_idempotency_key_shape_and_arg_sensitivity() -> None:
    k = idempotency_key("01ABC", 5, {"b": 1, "a": [1, 2]})
    assert k == f"01ABC:5:{content_hash({'a': [1, 2], 'b': 1})}"
    assert k != idempotency_key("01ABC", 5, {"b": 1, "a": [2, 1]})
    assert k != idempotency_key("01ABC", 6, {"b": 1, "a": [1, 2]})


def test_stale_changes_names_changed_reads() -> None:
    before_out: dict[int, Any] = {1: {"busy": []}, 2: {"busy": []}}
    before = {n: content_hash(o) for n, o in before_out.items()}
    after = {1: {"busy": []}, 2: {"busy": [["2026-11-23T13:00:00Z", "2026-11-23T14:00:00Z"]]}}
    changes = stale_changes(before, before_out, after)
    assert [c.step for c in changes] == [2]
    assert "at preview" in changes[0].describe() and "now" in changes[0].describe()
    assert stale_changes(before, before_out, before_out) == []


def test_compensations_reverse_order_with_args(registry: Registry) -> None:
    plan = _plan(registry, "purchase_item")
    add, buy = plan.step(4), plan.step(7)  # 5 reads the cart, 6 is gate-B
    done: list[tuple[Any, dict[str, Any], Any]] = [
        (add, {"item": {"sku": "A"}, "quantity": 2}, {"id": "line-7"}),
        (buy, {"max_total": "15.00"}, {"id": "order-9"}),
    ]
    comps = compensation_steps(plan, registry, done)
    assert [(c.call, c.args) for c in comps] == [
        ("cancel_order", {"order_id": "order-9"}),
        ("remove_from_cart", {"line_id": "line-7"}),
    ]
    meeting = _plan(registry, "schedule_meeting")
    create = meeting.step(5)
    comps = compensation_steps(meeting, registry, [(create, dict(create.args), {"status": 201})])
    assert [(c.call, c.args) for c in comps] == [
        ("delete_event", {"user": create.args["user"], "uid": create.args["uid"]})
    ]
