"""Compensations: the steps that undo writes that already happened (a saga's way back), derived
from the registry — pure, shared by interactive and durable execution (StepRunner SPEC
"Compensation").

A compensation is a new ``PlanStep`` outside the signed graph, numbered from the step it undoes:
``compensation_step(original)`` is ``10000 - original`` and ``original_of`` reads it back (its
idempotency key and its audit rows carry that number)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from countersign.kernel import Plan, PlanStep
from countersign.registry import Registry

__all__ = ["COMPENSATION_BASE", "compensation_step", "compensation_steps", "original_of"]

#: a compensation of step ``n`` is numbered ``COMPENSATION_BASE - n``
COMPENSATION_BASE = 10_000


def compensation_step(original: int) -> int:
    """The step number of the compensation that undoes step ``original``."""
    return COMPENSATION_BASE - original


def original_of(compensation: int) -> int:
    """The step a compensation numbered ``compensation`` undoes (``compensation_step``'s inverse)."""
    return COMPENSATION_BASE - compensation


def compensation_steps(
    plan: Plan, registry: Registry, done: Sequence[tuple[PlanStep, Mapping[str, Any], Any]]
) -> list[PlanStep]:
    """Steps that undo ``done`` writes (step, resolved args, output), newest first.

    Each compensation is a new PlanStep numbered ``compensation_step(original)``, not part of the
    signed graph; its args come from the registry's ``compensation.args`` (``args.<name>`` or
    ``result.id``/``result.link``). Writes without a compensation are skipped (and reported by the
    caller).
    """
    out: list[PlanStep] = []
    for step, args, result in reversed(done):
        comp = registry.op(step.uses, step.call).compensation
        if comp is None:
            continue
        cargs: dict[str, Any] = {}
        for name, src in comp.args.items():
            if src.startswith("args."):
                cargs[name] = args.get(src.removeprefix("args."))
            else:
                field = src.removeprefix("result.")
                cargs[name] = result.get(field) if isinstance(result, Mapping) else None
        target = registry.op(step.uses, comp.call)
        out.append(
            PlanStep(
                step=compensation_step(step.step),
                mode=step.mode,
                role=target.role,
                uses=step.uses,
                call=comp.call,
                args=cargs,
                dry_run=False,
            )
        )
    return out
