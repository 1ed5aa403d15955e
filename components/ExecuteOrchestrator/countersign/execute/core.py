"""Pure decisions of an execute: which gate guards which write, which reads a write depends on,
what changed since the preview, and how to undo writes that already happened.

The idempotency key and compensations live one floor down, in ``countersign.steps``, where both
runtimes' write protocol is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from countersign.kernel import CountersignError, Plan, content_hash
from countersign.registry import Registry
from countersign.steps import ancestors, guarding_gate

__all__ = [
    "Change",
    "StaleWorldError",
    "WriteSpec",
    "ancestors",
    "bounded",
    "stale_changes",
    "write_specs",
    "writes_before_gate",
]


class StaleWorldError(CountersignError):
    """What a write depends on changed since the preview; the person must approve again."""

    code = "stale_world"

    def __init__(self, plan_id: str, changes: Sequence[Change]) -> None:
        what = "; ".join(c.describe() for c in changes)
        super().__init__(
            f"plan {plan_id}: the world changed since the preview ({what}); approve again"
        )
        self.changes = list(changes)


@dataclass(frozen=True)
class Change:
    """One read whose result differs from what the person saw."""

    step: int
    before: Any
    after: Any

    def summary(self) -> dict[str, Any]:
        """For the audit and the API: the step and, for each changed field, old and new values
        as JSON (``bounded``: lists and objects cut by structure, never a repr cut mid-way), so
        the card can show them in the person's clock and currency."""
        fields: dict[str, Any] = {}
        if isinstance(self.before, Mapping) and isinstance(self.after, Mapping):
            for k in sorted(set(self.before) | set(self.after), key=str):
                if self.before.get(k) != self.after.get(k):
                    fields[str(k)] = [bounded(self.before.get(k)), bounded(self.after.get(k))]
        else:
            fields["value"] = [bounded(self.before), bounded(self.after)]
        return {"step": self.step, "changed": fields}

    def describe(self) -> str:
        """Short human text: 'step 1: busy [..] at preview, [..] now'."""
        return f"step {self.step}: {_short(self.before)} at preview, {_short(self.after)} now"


#: at most this many items of a list (or members of an object) in a change's values
_ITEMS = 20
#: nesting kept in a change's values (deeper: the count of what was left out)
_DEPTH = 4
#: characters kept of one string value (a leaf, not a repr of the whole)
_CHARS = 300


def bounded(v: Any, depth: int = 0) -> Any:
    """``v`` as JSON bounded by structure: at most ``_ITEMS`` items per list and members per
    object, ``_DEPTH`` levels (deeper containers become "(N items)"), strings of at most
    ``_CHARS`` characters; numbers, booleans and null as they are."""
    if isinstance(v, Mapping | list | tuple) and depth >= _DEPTH:
        return f"({len(v)} items)"
    if isinstance(v, Mapping):
        return {str(k): bounded(x, depth + 1) for k, x in list(v.items())[:_ITEMS]}
    if isinstance(v, list | tuple):
        return [bounded(x, depth + 1) for x in list(v)[:_ITEMS]]
    if isinstance(v, str):
        return v if len(v) <= _CHARS else v[: _CHARS - 1] + "…"
    if v is None or isinstance(v, bool | int | float):
        return v
    return str(v)[:_CHARS]


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 120 else text[:117] + "..."


@dataclass(frozen=True)
class WriteSpec:
    """A write step and what guards it."""

    step: int
    gate_id: str
    reads: tuple[int, ...]


def write_specs(plan: Plan, registry: Registry) -> list[WriteSpec]:
    """Every write step, the nearest gate among its ancestors, and the reads it depends on."""
    specs: list[WriteSpec] = []
    for s in plan.graph:
        op = registry.op(s.uses, s.call, step=s.step)
        if op.safety != "write":
            continue
        anc = ancestors(plan, s.step)
        gate = guarding_gate(plan, s.step)
        if gate is None:
            raise CountersignError(f"plan {plan.plan_id}: write step {s.step} has no gate")
        reads = tuple(
            sorted(
                a
                for a in anc
                if plan.step(a).gate_id is None
                and registry.op(plan.step(a).uses, plan.step(a).call).safety == "read"
            )
        )
        specs.append(WriteSpec(step=s.step, gate_id=gate, reads=reads))
    return specs


def writes_before_gate(plan: Plan, registry: Registry, gate_id: str) -> list[int]:
    """The writes a gate's step depends on (an earlier gate's writes: the cart line before the
    checkout's gate). GLOBAL_SPEC §13 inv. 4b: the gate opens only after each of them ran, so what
    it guards is in view when it is approved."""
    gate_step = next((s.step for s in plan.graph if s.gate_id == gate_id), None)
    if gate_step is None:
        return []
    return sorted(
        a
        for a in ancestors(plan, gate_step)
        if plan.step(a).gate_id is None
        and registry.op(plan.step(a).uses, plan.step(a).call).safety == "write"
    )


def stale_changes(
    before: Mapping[int, str],
    before_outputs: Mapping[int, Any],
    after_outputs: Mapping[int, Any],
) -> list[Change]:
    """Reads whose fingerprint differs from the preview's (``before`` holds fingerprints)."""
    changes = []
    for n in sorted(after_outputs):
        if n in before and content_hash(after_outputs[n]) != before[n]:
            changes.append(Change(step=n, before=before_outputs.get(n), after=after_outputs[n]))
    return changes
