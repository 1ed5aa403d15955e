"""Reading a caller's plans (Api SPEC, only your own plans; the event log is the status).

Every method takes the caller and answers only for that caller's plans: another user's plan is
indistinguishable from a missing one (``PlanNotFoundError``), in its answer and in its time (the
row is looked up by id and owner in one statement). The signed document is read as stored:
verification happens in the engine that uses it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from countersign.approvals import Approvals
from countersign.audit import AuditLog
from countersign.kernel import CountersignError, Plan, format_utc
from countersign.signer import KeyRing, ReceiptKeySigner, make_bundle
from countersign.steps import gate_offer, offered_choices
from countersign.storage import Database, PlanEvents, PlanStore, ReadPool, stored_document

from ..core import TERMINAL, PlanState, decode_cursor, encode_cursor, fold_events
from ..errors import AdminOnlyError, PlanCancelledError, PlanNotFoundError
from .runtime import Runtime

__all__ = ["PlanViews", "gates_of"]

#: a gate's state → its step's status
_GATE_STEP = {
    "passed": "succeeded",
    "spent": "succeeded",
    "rejected": "rejected",
    "closed": "skipped",
}
#: events read at once when folding a plan's whole log
_PAGE = 5000
#: rows as JSON objects (``list`` is a method name inside PlanViews)
Rows = list[dict[str, Any]]


@dataclass
class PlanViews:
    """The caller's plans: a plan's document, status, steps, gates and choices; the list; the
    receipt bundle; the audit rows."""

    db: Database
    plans: PlanStore
    events: PlanEvents
    approvals: Approvals
    audit: AuditLog
    keyring: KeyRing
    runtime: Runtime
    clock: Callable[[], datetime]
    #: hot single-statement reads (plan views, events) on the read pool when given
    reads: ReadPool | None = None

    def row(self, plan_id: str, user_id: str) -> dict[str, Any]:
        """The caller's plan row with its steps (and compact events on the read pool)."""
        row: dict[str, Any] | None = None
        if len(plan_id) == 26 and plan_id.isalnum():
            row = (
                self.reads.plan(plan_id, user_id)
                if self.reads is not None
                else self.plans.get(plan_id, owner=user_id)
            )
        if row is None or row["user_id"] != user_id:
            raise PlanNotFoundError(f"no plan {plan_id[:40]!r}")
        return row

    def document(self, plan_id: str, user_id: str) -> dict[str, Any]:
        """The stored signed plan of ``user_id`` (as stored: verification happens on use)."""
        return stored_document(self.row(plan_id, user_id))

    def owns(self, plan_id: str, user_id: str) -> bool:
        """Whether ``plan_id`` is a plan of ``user_id``."""
        try:
            self.row(plan_id, user_id)
        except PlanNotFoundError:
            return False
        return True

    def state(self, plan_id: str) -> PlanState:
        """The plan's status folded from all its events."""
        out: list[dict[str, Any]] = []
        after = 0
        while True:
            page = self.events.since(plan_id, after, limit=_PAGE)
            out.extend(page)
            if len(page) < _PAGE:
                return fold_events(out)
            after = int(page[-1]["seq"])

    def not_cancelled(self, plan_id: str) -> None:
        """Raise ``PlanCancelledError`` when the plan was cancelled."""
        if self.state(plan_id).status == "cancelled":
            raise PlanCancelledError(f"plan {plan_id} was cancelled")

    def parent_of(self, plan_id: str) -> str | None:
        """The plan ``plan_id`` revises, if any (its newest ``plan_revised`` event naming one)."""
        event = self.events.latest(plan_id, "plan_revised", having="revises")
        return str(event["details"]["revises"]) if event else None

    def show(self, plan_id: str, user_id: str) -> dict[str, Any]:
        """The signed plan, its status, per-step status and results, and its gates."""
        row = self.row(plan_id, user_id)
        document = stored_document(row)
        events = row.get("events")
        state = fold_events(events) if events is not None else self.state(plan_id)
        if events is not None and state.status == "unknown":
            # the stored row's events carry no execute details: whether the settlement asked a
            # person (``needs_attention``) is in them
            state = self.state(plan_id)
        outputs = {int(s["step"]): s.get("output") for s in row.get("steps", [])}
        graph: list[dict[str, Any]] = document["plan"].get("graph", [])
        offers = self._choices_of(document, row)
        steps = [
            {
                "step": s["step"],
                "uses": s["uses"],
                "call": s["call"],
                "role": s["role"],
                "mode": s["mode"],
                "gate_id": s.get("gate_id"),
                "status": _step_status(s, state),
                "output": outputs.get(s["step"]),
            }
            for s in graph
        ]
        return {
            "plan_id": plan_id,
            **document,
            "status": state.status,
            "steps": steps,
            "gates": [{**g, "choices": offers.get(g["gate_id"])} for g in gates_of(graph, state)],
            "workflow_id": state.workflow_id,
            "events": state.last_seq,
        }

    def list(self, user_id: str, *, limit: int, cursor: str | None) -> dict[str, Any]:
        """The caller's plans, newest first; ``next_cursor`` when there are more."""
        before = decode_cursor(cursor) if cursor else None
        rows = self.plans.page(user_id, limit=limit + 1, before=before)
        more = len(rows) > limit
        rows = rows[:limit]
        items = [
            {
                "plan_id": r["plan_id"],
                "intent": r["intent"],
                "created_at": format_utc(r["created_at"]),
                "status": self.state(r["plan_id"]).status,
            }
            for r in rows
        ]
        last = rows[-1] if rows else None
        return {
            "items": items,
            "next_cursor": encode_cursor(last["created_at"], last["plan_id"])
            if more and last
            else None,
        }

    def receipts(self, plan_id: str, user_id: str) -> dict[str, Any]:
        """The plan's receipt bundle (Signer SPEC §5): the signed plan as stored, its receipt
        chain, a head signed now, the public keys — verifiable offline."""
        document = self.document(plan_id, user_id)
        chain = self.approvals.receipt_chain(plan_id)
        signer = ReceiptKeySigner(self.keyring)
        return make_bundle(document, chain, signer=signer, exported_at=self.clock())

    def audit_rows(self, user_id: str, *, admin: bool, plan_id: str | None, limit: int) -> Rows:
        """Audit rows of one of the caller's plans (admins: any plan, or all rows)."""
        if plan_id is None and not admin:
            raise AdminOnlyError("give plan_id (only an admin reads the whole audit log)")
        if plan_id is not None and not admin:
            self.document(plan_id, user_id)
        with self.db.tx() as c:
            return self.audit.rows(c, plan_id=plan_id, limit=limit)

    # ---- what each gate offers (GLOBAL_SPEC §8, the choice at a gate) --------------------------
    def seen_outputs(self, plan: Plan, row: Mapping[str, Any] | None = None) -> dict[int, Any]:
        """What the person has seen of the plan's steps: the stored preview (refreshed when an
        execute waits at a later gate), the writes done, and what a watcher found (``row``: the
        plan's stored row — steps with status and fingerprint, and its events when it carries
        them — when the caller has it)."""
        row = row if row is not None else self.plans.get(plan.plan_id)
        outputs = done_outputs(row)
        outputs.update(PlanStore.preview_in(row)[0])
        if not any(s.role == "Watcher" for s in plan.graph):
            return outputs
        events = (row or {}).get("events")
        if events is None:
            events = self.events.since(plan.plan_id, 0, limit=10_000)
        for e in events:
            found = (e.get("details") or {}).get("found") if e["kind"] == "watcher_polled" else None
            if isinstance(found, Mapping) and e.get("step") is not None:
                # the run acts on the first slot it found (the one it holds and books)
                outputs[int(e["step"])] = {
                    k: v[:1] if isinstance(v, list) else v for k, v in found.items()
                }
        return outputs

    def gate_choices(
        self, plan: Plan, row: Mapping[str, Any] | None = None
    ) -> dict[str, dict[str, Any]]:
        """Per gate: whether it takes a choice and the choices it accepts now (the card shows
        these and nothing else; the approve call checks the same)."""
        outputs = self.seen_outputs(plan, row)
        out: dict[str, dict[str, Any]] = {}
        for s in plan.graph:
            if s.gate_id is None:
                continue
            offer = gate_offer(plan, self.runtime.registry, s.gate_id, outputs)
            out[s.gate_id] = {
                "takes_choice": offer.takes_choice,
                "kind": offer.spec.kind if offer.spec else None,
                "step": offer.step,
                "seen": offer.seen,
                "duration_min": int(offer.duration.total_seconds() // 60)
                if offer.duration
                else None,
                "options": offered_choices(offer, now=self.clock()),
            }
        return out

    def _choices_of(
        self, document: Mapping[str, Any], row: Mapping[str, Any]
    ) -> dict[str, dict[str, Any]]:
        """``gate_choices`` of a stored plan from the row already read; empty when it no longer
        fits the registry held (the approve call then says why)."""
        try:
            return self.gate_choices(Plan.model_validate(document["plan"]), row)
        except (CountersignError, KeyError, ValueError):
            return {}


def done_outputs(row: Mapping[str, Any] | None) -> dict[int, Any]:
    """What the plan's finished steps returned (``row``: the stored plan row with its steps)."""
    return {
        int(s["step"]): s["output"]
        for s in (row or {}).get("steps", [])
        if s["status"] == "done" and s["output"] is not None
    }


def gates_of(graph: list[dict[str, Any]], state: PlanState) -> list[dict[str, Any]]:
    """Each gate, the step that carries it and its decision so far."""
    return [
        {
            "gate_id": s["gate_id"],
            "step": s["step"],
            "status": state.gates.get(
                s["gate_id"], "closed" if state.status in TERMINAL else "open"
            ),
        }
        for s in graph
        if s.get("gate_id")
    ]


def _step_status(step: Mapping[str, Any], state: PlanState) -> str:
    """A step's status from the event log: its own events, or for a gate step its gate's."""
    if step["step"] in state.steps:
        return state.steps[step["step"]]
    gate = step.get("gate_id")
    if gate:
        return _GATE_STEP.get(state.gates.get(gate, ""), "pending")
    return "skipped" if state.status in TERMINAL else "pending"
