"""Spending limits a write declares in the registry (``Operation.budget``), checked before its gate
is approved and again right before it runs (StepRunner SPEC, spending limits: the person
approves what fits what they asked for — "under 80 euros" is part of the signed plan, not a hope).

The limit is the write's own signed argument (``budget.arg``, e.g. the purchase's ``max_total``);
what would be charged now is the ``budget.total`` field (e.g. ``cart_total``) of the latest output
of an earlier write in the same plan (the cart line gate-A's write added). Nothing to compare yet
(no earlier write reported a total) → the provider's own refusal is the guard. Money is compared
as ``Decimal`` from its string form (PEERS.md: money is a string in signed documents). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from countersign.kernel import CountersignError, Plan
from countersign.registry import Registry

__all__ = ["OverBudgetError", "check_budget"]


class OverBudgetError(CountersignError):
    """A write's spending limit is below what would be charged now; nothing was approved or run."""

    code = "over_budget"

    def __init__(self, message: str, *, step: int, limit: str, total: str) -> None:
        super().__init__(message)
        self.step, self.limit, self.total = step, limit, total


def _money(v: Any) -> Decimal | None:
    if isinstance(v, bool) or v is None:
        return None
    try:
        d = Decimal(str(v).strip())
    except InvalidOperation:
        return None
    return d if d.is_finite() else None


def check_budget(plan: Plan, registry: Registry, gate_id: str, outputs: Mapping[int, Any]) -> None:
    """Raise ``OverBudgetError`` if a write ``gate_id`` guards declares a budget that the latest
    reported total is over. ``outputs``: step number → normalized output of the writes done so far.
    """
    guarded = _guarded(plan, gate_id)
    for step in plan.graph:
        if step.step not in guarded:
            continue
        op = registry.op(step.uses, step.call)
        if op.budget is None:
            continue
        limit = _money(step.args.get(op.budget.arg))
        if limit is None:
            continue  # not a constant the plan signed (a reference): nothing to hold it against
        total = _latest_total(outputs, op.budget.total, before=step.step)
        if total is None or total[1] <= limit:
            continue
        raise OverBudgetError(
            f"plan {plan.plan_id} step {step.step} ({step.uses}.{step.call}): "
            f"{op.budget.total} {total[0]} (step {total[2]}) is over the budget "
            f"{op.budget.arg} {step.args.get(op.budget.arg)}; nothing is approved or bought — "
            "take something out or plan again with a higher budget",
            step=step.step,
            limit=str(step.args.get(op.budget.arg)),
            total=total[0],
        )


def _guarded(plan: Plan, gate_id: str) -> set[int]:
    """The steps a gate guards: those that depend on its gate step, directly or through writes of
    the same group (the planner hangs a group's first writes on its gate)."""
    gate_steps = {s.step for s in plan.graph if s.gate_id == gate_id}
    out: set[int] = set()
    for s in plan.graph:  # the graph is in topological order
        if s.gate_id is not None or s.dry_run:
            continue
        if set(s.after) & (gate_steps | out):
            out.add(s.step)
    return out


def _latest_total(
    outputs: Mapping[int, Any], field: str, *, before: int
) -> tuple[str, Decimal, int] | None:
    for n in sorted(outputs, reverse=True):
        if n >= before:
            continue
        out = outputs[n]
        if isinstance(out, Mapping) and isinstance(out.get("output"), Mapping):
            out = out["output"]
        if isinstance(out, Mapping) and field in out:
            d = _money(out[field])
            if d is not None:
                return str(out[field]), d, n
    return None
