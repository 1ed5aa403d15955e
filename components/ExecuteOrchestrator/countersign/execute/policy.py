"""The policy's gate rules again, at the write (ExecuteOrchestrator SPEC 3d, GLOBAL_SPEC §9).

The Planner put on each gate the ``gate`` rules its writes matched (``because``). Here, with the
arguments as they will be sent (references resolved from what was read and chosen), each write is
evaluated against the rules of the policy in force now: a ``deny`` rule refuses it; a ``gate``
rule the write's gate does not name refuses it too (the plan was made under other rules, or its
gate was not what the policy asks for, or the person's facts moved: a recipient removed from the
contacts since the approval). ``facts``: the person's sets as read now (``Executor.facts``). Refusals are audited (``execute_refused``, reason
``policy_refused``) before anything of the gate is written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from countersign.binding import resolve_refs
from countersign.kernel import CountersignError, Plan, Policy
from countersign.kernel.rules import RuleFacts
from countersign.steps import policy_refusal
from countersign.steps.policy import FactsSource, write_facts

from .state import PolicyRefusedError

__all__ = ["FactsSource", "check_policy", "write_facts"]


def check_policy(
    plan: Plan,
    gate: str,
    steps: Iterable[int],
    outputs: Mapping[int, Any],
    choices: Mapping[str, Any],
    *,
    policy: Policy,
    refused: Callable[[str, int, str], None],
    facts: RuleFacts | None = None,
) -> None:
    """Refuse (``PolicyRefusedError``, after ``refused(reason, step, op)`` audits it) the first
    write of ``steps`` the policy denies or gates without its gate naming the rule."""
    for n in steps:
        s = plan.step(n)
        op = f"{s.uses}.{s.call}"
        try:
            args = resolve_refs(s.args, outputs, choices)
        except CountersignError:
            args = dict(s.args)  # what cannot be resolved yet stays a reference: unknown
        known = args if isinstance(args, Mapping) else {}
        why = policy_refusal(plan, s, known, policy, gate=gate, facts=facts)
        if why is not None:
            refused(why, n, op)
            raise PolicyRefusedError(f"plan {plan.plan_id}: {why}")
