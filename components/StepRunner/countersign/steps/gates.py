"""Which gate guards a write, and what a gate's token must be allowed to do (pure; both runtimes
redeem tokens with ``gate_scopes``: StepRunner SPEC "Scopes of a gate")."""

from __future__ import annotations

from countersign.kernel import Plan
from countersign.registry import Registry

from .choices import ancestors

__all__ = ["gate_scopes", "guarding_gate"]


def guarding_gate(plan: Plan, n: int) -> str | None:
    """The gate that guards step ``n``: the nearest gate step among its ancestors (the one with
    the highest step number); ``None`` when no gate comes before it."""
    gates = [(a, g) for a in ancestors(plan, n) if (g := plan.step(a).gate_id)]
    return max(gates)[1] if gates else None


def gate_scopes(plan: Plan, registry: Registry, gate_id: str) -> list[str]:
    """The scopes a token for ``gate_id`` must carry: those of the writes it guards (each write's
    op's ``scopes``), sorted."""
    return sorted(
        {
            scope
            for s in plan.graph
            if registry.op(s.uses, s.call).safety == "write"
            and guarding_gate(plan, s.step) == gate_id
            for scope in registry.op(s.uses, s.call).scopes
        }
    )
