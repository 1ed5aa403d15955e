"""Settle a plan's ``unknown`` write keys from what n8n recorded (ExecuteOrchestrator SPEC 9):
``countersign.n8n.executions`` finds the execution that carried a key (or proves there is none);
its op node's answer is classified as a live answer would be (``steps.classify``) and the ledger
settled from it. Anything not proven stays ``unknown`` for a person."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from countersign.binding import normalize_output
from countersign.kernel import Plan, PlanStep, ascii_digits
from countersign.n8n.executions import (
    ExecutionSource,
    KeyRef,
    Lookup,
    RecordScan,
    find_execution,
    read_node,
)
from countersign.registry import Registry
from countersign.signer import VerifiedPlan
from countersign.steps import Attempt, classify, ledger_result, natural_key
from countersign.storage import IdempotencyLedger, PlanStore
from countersign.workflowbuilder import CredentialRef, build_workflow_for_step

from .checks import Audit

__all__ = ["Reconciler", "reconcilable"]


@dataclass(frozen=True)
class Reconciler:
    """Settles ledger keys from n8n's execution records."""

    registry: Registry
    ledger: IdempotencyLedger
    plans: PlanStore
    audit: Audit
    credentials: Mapping[str, CredentialRef]
    clock: Callable[[], datetime]

    async def reconcile(
        self, source: ExecutionSource, verified: VerifiedPlan, *, user_id: str, scan: RecordScan
    ) -> dict[int, str]:
        """``{step: completed | failed | unknown}`` for the plan's ``unknown`` graph-step keys
        (a compensation's key is settled by a person)."""
        out: dict[int, str] = {}
        for row in self.ledger.unknown_keys(verified.plan.plan_id):
            step = reconcilable(verified.plan, str(row["key"]))
            if step is not None:
                out[step.step] = await self._settle(source, verified, step, row, scan, user_id)
        return out

    async def _settle(
        self,
        source: ExecutionSource,
        verified: VerifiedPlan,
        step: PlanStep,
        row: Mapping[str, Any],
        scan: RecordScan,
        user_id: str,
    ) -> str:
        """Find the key's execution, settle the ledger from it; the outcome."""
        plan = verified.plan
        key = str(row["key"])
        wf = build_workflow_for_step(
            plan, verified.plan_hash, step, self.registry, credentials=self.credentials
        )
        sent = row.get("sent_at") or row["created_at"]
        ref = KeyRef(
            plan.plan_id, step.step, key.rsplit(":", 1)[1], sent, max(sent, row["updated_at"])
        )
        lookup = await find_execution(
            source, workflow_name=str(wf.workflow["name"]), key=ref, now=self.clock(), scan=scan
        )
        verdict, result, reason = self._verdict(step, lookup)
        if verdict == "completed":
            self.ledger.reconcile(key, outcome="completed", result=result, actor=lookup.reason)
            self.plans.set_step(plan.plan_id, step.step, "done", output=result["output"])
        elif verdict == "failed":
            self.ledger.reconcile(key, outcome="failed", actor=lookup.reason)
        else:
            self.audit(
                kind="reconcile_unsettled",
                status="unknown",
                actor=user_id,
                plan_id=plan.plan_id,
                step=step.step,
                op=f"{step.uses}.{step.call}",
                reason=reason[:500],
            )
        return verdict

    def _verdict(self, step: PlanStep, lookup: Lookup) -> tuple[str, Any, str]:
        """``(completed | failed | unknown, the ledger result, why)`` from a lookup."""
        if lookup.kind == "absent":
            return "failed", None, lookup.reason
        if lookup.kind == "unknown" or lookup.execution is None:
            return "unknown", None, lookup.reason
        reading = read_node(lookup.execution, f"{step.uses}.{step.call}")
        if reading.kind != "answered" or reading.item is None:
            return reading.kind, None, f"{lookup.reason}: {reading.reason}"
        op = self.registry.op(step.uses, step.call)
        output = normalize_output(op.output, reading.item, reading.args)
        status = reading.item.get("statusCode")
        attempt = Attempt(
            "answered", status=status if isinstance(status, int) else None, output=output
        )
        verdict = classify(attempt, natural_key=natural_key(op))
        settled = "completed" if verdict == "deduplicated" else verdict
        return (
            settled,
            ledger_result(attempt, verdict),
            f"{lookup.reason}: the provider answered {attempt.status}",
        )


def reconcilable(plan: Plan, key: str) -> PlanStep | None:
    """The plan step a ledger key belongs to (``plan_id:step:arg_hash``); ``None`` for a
    compensation's key (its step is not in the signed graph)."""
    step_no = key.split(":", 2)[1]
    if not ascii_digits(step_no) or not 1 <= int(step_no) <= len(plan.graph):
        return None
    return plan.step(int(step_no))
