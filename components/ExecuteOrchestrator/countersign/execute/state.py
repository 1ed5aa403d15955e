"""What one execute call carries and returns: the report, the refusal, the run's state, and the
small readings of the plan and its stored progress the other modules share."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from countersign.kernel import CountersignError, ExecuteWrapper, Plan, PlanStep
from countersign.signer import VerifiedPlan
from countersign.steps import N8nStepRunner

from .core import Change, WriteSpec, ancestors

__all__ = [
    "Done",
    "ExecuteRefusedError",
    "ExecuteReport",
    "PolicyRefusedError",
    "Progress",
    "Run",
    "ancestors_of",
    "gate_order",
    "gate_reads",
    "gate_step",
    "output_of",
    "progress_of",
]

#: a plan step's stored status and output, by step number (``PlanStore.get``'s steps)
Progress = dict[int, tuple[str, Any]]
#: a write that happened: its step, its resolved args and its ledger result
Done = tuple[PlanStep, dict[str, Any], Any]


class ExecuteRefusedError(CountersignError):
    """The execute cannot start (wrong user, missing token, no preview, durable steps, …)."""

    code = "execute_refused"


class PolicyRefusedError(ExecuteRefusedError):
    """The policy's gate rules, evaluated again on the arguments as sent, refuse a write: a rule
    denies it, or gates it and the write's gate does not name that rule (the plan was made under
    other rules): nothing of the gate is written; plan again."""

    code = "policy_refused"


@dataclass(frozen=True)
class ExecuteReport:
    """What an execute did."""

    plan_id: str
    status: str
    wrappers: list[ExecuteWrapper] = field(default_factory=list)
    compensated: list[int] = field(default_factory=list)
    workflow_id: str | None = None
    #: ``waiting``: the next gate to approve, and what it guards, read afresh
    waiting_gate: str | None = None
    gate_preview: dict[str, Any] | None = None
    #: ``failed``: what changed in the reads the failed write depended on (old and new values)
    stale: list[Change] = field(default_factory=list)
    #: ``failed``: what the failure is and what follows (``execute.recovery``): ``class``,
    #: ``action`` (replan, compensate, ask), ``reason`` in plain words, ``step``, ``status``,
    #: ``retry_after_s``, ``sends``, ``compensated``
    failure: dict[str, Any] | None = None


@dataclass
class Run:
    """One execute call's state: what has been read and written, and the gates passed."""

    verified: VerifiedPlan
    runner: N8nStepRunner
    outputs: dict[int, Any]
    choices: dict[str, Any]
    user_id: str
    wrappers: dict[int, ExecuteWrapper] = field(default_factory=dict)
    done: list[Done] = field(default_factory=list)

    @property
    def plan(self) -> Plan:
        """The verified plan."""
        return self.verified.plan

    def report(self, status: str, **extra: Any) -> ExecuteReport:
        """The report of this run so far (its wrappers in step order)."""
        wrappers = [self.wrappers[k] for k in sorted(self.wrappers)]
        return ExecuteReport(self.plan.plan_id, status, wrappers, **extra)


def gate_order(plan: Plan, specs: list[WriteSpec]) -> list[str]:
    """The gates guarding writes, in the order of their steps."""
    return sorted({w.gate_id for w in specs}, key=lambda g: gate_step(plan, g))


def gate_step(plan: Plan, gate: str) -> int:
    """The step number of ``gate``."""
    for s in plan.graph:
        if s.gate_id == gate:
            return s.step
    raise ExecuteRefusedError(f"plan {plan.plan_id} has no gate {gate}")


def gate_reads(g_specs: list[WriteSpec]) -> list[int]:
    """The reads a gate's writes depend on, in step order."""
    return sorted({r for w in g_specs for r in w.reads})


def progress_of(row: Mapping[str, Any] | None) -> Progress:
    """Each step's stored status and output, from a ``PlanStore.get`` row."""
    if row is None:
        return {}
    return {int(s["step"]): (str(s["status"]), s["output"]) for s in row["steps"]}


def output_of(result: Any) -> Any:
    """A write's output from its ledger result."""
    return result.get("output") if isinstance(result, Mapping) else result


def ancestors_of(plan: Plan, steps: set[int]) -> set[int]:
    """Every step any of ``steps`` depends on."""
    return set().union(*(ancestors(plan, n) for n in steps)) if steps else set()
