"""The policy's gate rules at the write, one evaluation for both runtimes (GLOBAL_SPEC §9;
ExecuteOrchestrator SPEC 3d).

The Planner put on each gate the ``gate`` rules its writes matched (its ``because``). Just before
a write is sent — with its arguments as they will be sent — it is evaluated against the rules of
the policy in force now: a sure ``deny`` rule refuses it, and so does a ``gate`` rule the write's
guarding gate does not name (a plan signed with a gate dropped, or made under other rules). Pure:
the interactive executor (``execute.policy.check_policy``) and the durable ``write_step`` audit
and raise.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from countersign.kernel import Plan, PlanStep, Policy, rule_hits

from .gates import guarding_gate

__all__ = ["policy_refusal"]


def _named(plan: Plan, gate: str | None) -> set[str]:
    """The rules the gate's ``because`` names (none without a gate)."""
    if gate is None:
        return set()
    step = next((s for s in plan.graph if s.gate_id == gate), None)
    because = step.args.get("because") if step is not None else None
    items = because if isinstance(because, list) else []
    return {str(b.get("rule")) for b in items if isinstance(b, Mapping)}


def policy_refusal(
    plan: Plan,
    step: PlanStep,
    args: Mapping[str, Any],
    policy: Policy,
    *,
    gate: str | None = None,
) -> str | None:
    """Why the write ``step`` with ``args`` may not run under ``policy`` (None: it may);
    ``gate``: the gate that guards it (default: the plan's guarding gate of the step)."""
    gate = gate if gate is not None else guarding_gate(plan, step.step)
    named = _named(plan, gate)
    op = f"{step.uses}.{step.call}"
    for hit in rule_hits(policy.rules, op, args):
        if hit.then == "deny" and hit.sure:
            return f"rule {hit.rule!r} denies step {step.step} ({op}): {hit.because}"
        if hit.then == "gate" and hit.rule not in named:
            where = f"{gate} does not say so" if gate else "no gate guards it"
            return (
                f"rule {hit.rule!r} gates step {step.step} ({op}) because {hit.because}, and "
                f"{where} (the plan was made under other rules): plan again"
            )
    return None
