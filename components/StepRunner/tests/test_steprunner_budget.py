"""A budget in the intent ("under 15 euros") is enforced before gate-B (issue 14): the purchase's
signed ``max_total`` against the ``cart_total`` the cart write reported."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from countersign.kernel import Plan, Policy, source_registry_dir
from countersign.planner import make_plan
from countersign.planner.testing import make_intent
from countersign.registry import Registry, load_registry, registry_from_documents
from countersign.steps import OverBudgetError, check_budget

_REGISTRY = load_registry(source_registry_dir())
LOCAL = Policy(providers={"calendar": "caldav", "mail": "smtp", "chat": "slack"})


@pytest.fixture(scope="module")
def shopping(registry: Registry) -> Plan:
    plan = make_plan(
        make_intent(
            "purchase_item", entities={"query": "usb cable", "max_price": "15.00", "quantity": 1}
        ),
        [],
        registry,
        LOCAL,
    )
    assert isinstance(plan, Plan)
    return plan


def _steps(plan: Plan) -> dict[str, int]:
    return {f"{s.uses}.{s.call}": s.step for s in plan.graph}


def test_within_budget_passes_and_over_it_names_both(shopping: Plan, registry: Registry) -> None:
    add = _steps(shopping)["shop.sandbox.add_to_cart"]
    buy = _steps(shopping)["shop.sandbox.purchase"]
    check_budget(shopping, registry, "gate-B", {add: {"cart_total": "15.00"}})
    with pytest.raises(OverBudgetError, match=r"cart_total 22\.40 .* max_total 15\.00") as e:
        check_budget(shopping, registry, "gate-B", {add: {"id": "line-1", "cart_total": "22.40"}})
    assert (e.value.step, e.value.limit, e.value.total, e.value.code) == (
        buy,
        "15.00",
        "22.40",
        "over_budget",
    )
    # an Execute wrapper's shape ({"output": …}) reads the same
    with pytest.raises(OverBudgetError):
        check_budget(shopping, registry, "gate-B", {add: {"output": {"cart_total": "15.01"}}})


def test_gate_a_has_no_budget_and_nothing_reported_passes(
    shopping: Plan, registry: Registry
) -> None:
    add = _steps(shopping)["shop.sandbox.add_to_cart"]
    check_budget(shopping, registry, "gate-A", {add: {"cart_total": "999.00"}})
    check_budget(shopping, registry, "gate-B", {})
    # what is not money is not compared (the provider's own refusal stays the guard)
    check_budget(shopping, registry, "gate-B", {add: {"cart_total": "lots"}})
    check_budget(shopping, registry, "gate-B", {add: {"cart_total": True}})


def test_the_latest_total_counts(shopping: Plan, registry: Registry) -> None:
    """Only outputs of steps before the purchase count, the latest first."""
    steps = _steps(shopping)
    add, buy = steps["shop.sandbox.add_to_cart"], steps["shop.sandbox.purchase"]
    outputs: dict[int, Any] = {1: {"cart_total": "99.00"}, add: {"cart_total": "9.90"}}
    check_budget(shopping, registry, "gate-B", outputs)
    outputs[buy + 1] = {"cart_total": "99.00"}  # a later step's report is not what gate-B buys
    check_budget(shopping, registry, "gate-B", outputs)


@given(
    total=st.decimals(min_value=0, max_value=10_000, places=2, allow_nan=False),
    limit=st.decimals(min_value=0, max_value=10_000, places=2, allow_nan=False),
)
def test_refused_exactly_when_over(total: Decimal, limit: Decimal) -> None:
    reg = _REGISTRY
    plan = make_plan(
        make_intent(
            "purchase_item", entities={"query": "cable", "max_price": str(limit), "quantity": 1}
        ),
        [],
        reg,
        LOCAL,
    )
    assert isinstance(plan, Plan)
    add = _steps(plan)["shop.sandbox.add_to_cart"]
    over = total > limit
    try:
        check_budget(plan, reg, "gate-B", {add: {"cart_total": str(total)}})
        assert not over
    except OverBudgetError:
        assert over


def test_registry_refuses_a_budget_on_a_read_or_an_unknown_arg() -> None:
    from countersign.kernel import InputError

    def connector(**budget_op: Any) -> dict[str, Any]:
        op = {
            "node": {"type": "n8n-nodes-base.httpRequest", "type_version": 4.2},
            "safety": "write",
            "previewable": False,
            "role": "Booker",
            "scopes": ["x.write"],
            "args": {"required": ["max_total"]},
            "idempotency": {"via": "ledger"},
            **budget_op,
        }
        return {"x": {"id": "x", "title": "X", "ops": {"pay": op}}}

    with pytest.raises(InputError, match=r"budget\.arg"):
        registry_from_documents(connector(budget={"arg": "limit", "total": "cart_total"}), {})
    with pytest.raises(InputError, match="only write ops have a budget"):
        registry_from_documents(
            connector(
                budget={"arg": "max_total", "total": "cart_total"},
                safety="read",
                previewable=True,
                idempotency=None,
            ),
            {},
        )
