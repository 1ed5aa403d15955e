"""The policy's gate rules at the write, one evaluation for both runtimes (GLOBAL_SPEC §9;
ExecuteOrchestrator SPEC 3d).

The Planner put on each gate the ``gate`` rules its writes matched (its ``because``). Just before
a write is sent — with its arguments as they will be sent — it is evaluated against the rules of
the policy in force now: a sure ``deny`` rule refuses it, and so does a ``gate`` rule the write's
guarding gate does not name (a plan signed with a gate dropped, or made under other rules). The
set tests read the person's ``facts`` as the caller read them at the write (``self``, their
``contacts`` from the live store): a recipient removed from the contacts since the plan was
approved hits a ``not_in_set: contacts`` rule its gate does not name, and the write is refused.
A set the caller did not give is unknown: a ``gate`` rule on it applies (its gate must name it).
Pure: the interactive executor (``execute.policy.check_policy``) and the durable ``write_step``
audit and raise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from countersign.kernel import Plan, PlanStep, Policy, rule_hits
from countersign.kernel.rules import RuleFacts, person_facts, set_names

from .gates import guarding_gate

__all__ = ["FactsSource", "contacts_source", "policy_refusal", "write_facts"]

#: the person's facts by user id, read from the live store (their contacts); the caller that
#: builds the runtime gives it (the API's executor, the durable worker's activities)
FactsSource = Callable[[str], RuleFacts]


def contacts_source(contacts: Callable[[str], Iterable[tuple[str, str]]]) -> FactsSource:
    """A ``FactsSource`` over a person's address book as ``(name, e-mail)`` pairs (ContextRAG's
    ``MemoryStore.contacts``, read when a write is checked): ``self`` and ``contacts``."""
    return lambda user_id: person_facts(user_id, [mail for _, mail in contacts(user_id)])


def write_facts(policy: Policy, user_id: str, source: FactsSource | None) -> RuleFacts:
    """The facts the set tests read at a write: ``self`` (the plan's user) always, and what
    ``source`` reads — only when a rule names another set (the default rules name none: no
    read on the gate path)."""
    if source is None or set_names(policy.rules) <= {"self"}:
        return person_facts(user_id)
    read = source(user_id)
    if "self" in read.sets:
        return read
    return RuleFacts({**read.sets, **person_facts(user_id).sets})


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
    facts: RuleFacts | None = None,
) -> str | None:
    """Why the write ``step`` with ``args`` may not run under ``policy`` (None: it may);
    ``gate``: the gate that guards it (default: the plan's guarding gate of the step);
    ``facts``: the person's sets the rules test (None: none known)."""
    gate = gate if gate is not None else guarding_gate(plan, step.step)
    named = _named(plan, gate)
    op = f"{step.uses}.{step.call}"
    for hit in rule_hits(policy.rules, op, args, facts):
        if hit.then == "deny" and hit.sure:
            return f"rule {hit.rule!r} denies step {step.step} ({op}): {hit.because}"
        if hit.then == "gate" and hit.rule not in named:
            where = f"{gate} does not say so" if gate else "no gate guards it"
            return (
                f"rule {hit.rule!r} gates step {step.step} ({op}) because {hit.because}, and "
                f"{where} (the plan was made under other rules): plan again"
            )
    return None
