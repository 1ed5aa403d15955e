"""The policy's gate rules again, at a durable write (issue 26 §1; ExecuteOrchestrator SPEC 3d).

The Planner put on each gate the ``gate`` rules its writes matched (its ``because``). Before a
durable write is sent, the ``write_step`` activity evaluates the write — with its arguments as
they will be sent (references resolved from what was read and chosen) — against the rules of the
policy this worker runs under, as the interactive executor does (``execute.policy.check_policy``,
the same rule semantics over ``kernel.rule_hits``): a sure ``deny`` rule refuses it, and so does a
``gate`` rule that the write's guarding gate (``steps.guarding_gate``) does not name — a plan
signed with a gate dropped, or made under other rules. The evaluation is StepRunner's
``steps.policy_refusal``, the one both runtimes call; the caller audits and raises. The set tests
read the person's facts at the write (``steps.policy.write_facts``: ``self``, and the contacts
the worker's ``FactsSource`` reads from the live store when a rule names them).
"""

from __future__ import annotations

from countersign.steps import policy_refusal
from countersign.steps.policy import FactsSource, write_facts

__all__ = ["FactsSource", "policy_refusal", "write_facts"]
