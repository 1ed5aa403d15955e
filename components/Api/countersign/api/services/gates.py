"""Deciding a gate (Api SPEC, gates and what they accept; Approvals SPEC §4).

Approve issues a short-lived, single-use token bound to the plan hash, the gate and the caller,
after three checks on the plan's stored row (one read): the gate's earlier writes ran (it is in
view, GLOBAL_SPEC §13 inv. 4b), what would be charged now is within the signed budget, and the
choice is one the gate offered (GLOBAL_SPEC §8). Each refusal is audited ``approval_refused``
before it is raised. A plan running on Temporal gets the decision at once (its update).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from countersign.approvals import Approvals
from countersign.audit import AuditLog
from countersign.durable import RejectGate, approval_for
from countersign.execute import ExecuteRefusedError, writes_before_gate
from countersign.kernel import InputError, Plan, Policy, format_utc
from countersign.signer import KeyRing, verify_signed_plan
from countersign.steps import (
    ChoiceError,
    OverBudgetError,
    check_budget,
    check_choice,
    check_current,
    gate_offer,
)
from countersign.storage import Database

from .durable import DurableLink
from .runtime import Runtime
from .views import PlanViews, done_outputs

__all__ = ["Gates"]


@dataclass
class Gates:
    """Approve and reject gates of the caller's plans."""

    db: Database
    views: PlanViews
    runtime: Runtime
    approvals: Approvals
    audit: AuditLog
    durable: DurableLink
    keyring: KeyRing
    policy: Policy
    clock: Callable[[], datetime]

    async def approve(
        self, plan_id: str, gate_id: str, user_id: str, *, choice: Any = None
    ) -> dict[str, Any]:
        """A token for one gate (bound to the plan hash, the gate and the caller). A plan running
        on Temporal gets the decision at once: the token is spent here, where it arrived, and
        the workflow's ``approve_gate`` update names it by its hash (``durable.approval_for``),
        so no token enters the run's history."""
        out = self.issue_token(plan_id, gate_id, user_id, choice=choice)
        run = self.durable.handed_to(plan_id)
        if run is not None:
            verified = verify_signed_plan(self.views.document(plan_id, user_id), keys=self.keyring)
            gate = approval_for(
                self.approvals,
                out["token"],
                plan=verified.plan,
                plan_hash=verified.plan_hash,
                gate_id=gate_id,
                user_id=user_id,
                registry=self.runtime.registry,
            )
            out["durable"] = {
                "workflow_id": run.workflow_id,
                "result": await self.durable.approve(plan_id, run, gate),
            }
        return out

    def issue_token(
        self, plan_id: str, gate_id: str, user_id: str, *, choice: Any = None
    ) -> dict[str, Any]:
        """A token for one gate, without sending it anywhere."""
        document = self.views.document(plan_id, user_id)
        self.views.not_cancelled(plan_id)
        verified = verify_signed_plan(document, keys=self.keyring)
        plan = verified.plan
        check_current(plan, registry_version=self.runtime.registry.version, now=self.clock())
        gates = {s.gate_id for s in plan.graph if s.gate_id}
        if gate_id not in gates:
            raise InputError(
                f"plan {plan_id} has no gate {gate_id[:16]!r}; its gates: {sorted(gates)}"
            )
        row = self.views.plans.get(plan_id)  # one read for the three checks
        self._in_view(plan, gate_id, user_id, row)
        self._within_budget(plan, gate_id, user_id, row)
        choice = self._offered(plan, gate_id, user_id, choice, row)
        token = self.approvals.issue(
            plan_id=plan_id,
            plan_hash=verified.plan_hash,
            gate_id=gate_id,
            user_id=user_id,
            scopes=plan.constraints.scopes,
            ttl_s=self.policy.approval_ttl_s,
            choice=choice,
            not_after=plan.meta.created_at + timedelta(seconds=plan.constraints.ttl_s),
        )
        return {"token": token.token, "gate_id": gate_id, "expires_at": format_utc(token.exp)}

    async def reject(
        self, plan_id: str, gate_id: str, user_id: str, *, reason: str | None
    ) -> dict[str, Any]:
        """Reject a gate: nothing it guards will run (a running workflow records it itself)."""
        document = self.views.document(plan_id, user_id)
        run = self.durable.handed_to(plan_id)
        if run is not None:
            result = await self.durable.reject(
                plan_id, run, RejectGate(gate_id=gate_id, reason=reason)
            )
            return {
                "gate_id": gate_id,
                "decision": "rejected",
                "durable": {"workflow_id": run.workflow_id, "result": result},
            }
        verified = verify_signed_plan(document, keys=self.keyring)
        self.approvals.reject(
            plan_id=plan_id,
            plan_hash=verified.plan_hash,
            gate_id=gate_id,
            user_id=user_id,
            reason=reason,
        )
        return {"gate_id": gate_id, "decision": "rejected"}

    # ---- the checks before a token is issued ----------------------------------------------------
    def _in_view(
        self, plan: Plan, gate_id: str, user_id: str, row: Mapping[str, Any] | None
    ) -> None:
        """A gate that depends on an earlier gate's writes is approved only after they ran
        (GLOBAL_SPEC §13 inv. 4b): otherwise refused (409 ``execute_refused``), audited."""
        done = {int(s["step"]) for s in (row or {}).get("steps", []) if s["status"] == "done"}
        registry = self.runtime.registry
        pending = [w for w in writes_before_gate(plan, registry, gate_id) if w not in done]
        if not pending:
            return
        self._refused(plan, gate_id, user_id, "gate_not_in_view", pending_writes=pending)
        raise ExecuteRefusedError(
            f"plan {plan.plan_id}: {gate_id} guards what follows steps {pending}, which have not "
            "run yet; approve and execute the earlier gate first, then this one with its review "
            "in view"
        )

    def _within_budget(
        self, plan: Plan, gate_id: str, user_id: str, row: Mapping[str, Any] | None
    ) -> None:
        """A gate whose writes declare a budget is not approved while what would be charged now
        (reported by the writes done so far) is over it: refused with ``over_budget``, audited."""
        try:
            check_budget(plan, self.runtime.registry, gate_id, done_outputs(row))
        except OverBudgetError as e:
            self._audit(
                plan,
                gate_id,
                user_id,
                e.code,
                step=e.step,
                details={"limit": e.limit, "total": e.total},
            )
            raise

    def _offered(
        self, plan: Plan, gate_id: str, user_id: str, choice: Any, row: Mapping[str, Any] | None
    ) -> Any:
        """The canonical choice if the gate offered it (GLOBAL_SPEC §8, the choice at a gate);
        otherwise ``ChoiceError`` naming the field, audited as ``approval_refused``."""
        outputs = self.views.seen_outputs(plan, row)
        offer = gate_offer(plan, self.runtime.registry, gate_id, outputs)
        try:
            return check_choice(offer, choice, now=self.clock())
        except ChoiceError as e:
            self._refused(plan, gate_id, user_id, e.code, field=e.field)
            raise

    def _refused(self, plan: Plan, gate_id: str, user_id: str, reason: str, **details: Any) -> None:
        """Audit an approve call refused before a token was issued."""
        self._audit(plan, gate_id, user_id, reason, details=details)

    def _audit(
        self,
        plan: Plan,
        gate_id: str,
        user_id: str,
        reason: str,
        *,
        details: dict[str, Any],
        step: int | None = None,
    ) -> None:
        entry: dict[str, Any] = {
            "kind": "approval_refused",
            "status": "refused",
            "actor": user_id,
            "plan_id": plan.plan_id,
            "op": gate_id,
            "reason": reason,
            "details": details,
        }
        if step is not None:
            entry["step"] = step
        with self.db.tx() as c:
            self.audit.append(c, entry)
