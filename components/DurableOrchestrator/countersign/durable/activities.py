"""Temporal activities: every I/O of the durable workflows (verify, poll, redeem, write, notify).

Thin: each wires an adapter (httpx, smtplib, the Postgres ledgers) to the shared cores. Our errors
become ``ApplicationError(type=<code>, non_retryable=not error.retryable)``; a write whose outcome
is unknown is never retried by Temporal (non-retryable), it waits for reconciliation.
"""

from __future__ import annotations

import smtplib
import time
from collections.abc import Mapping
from email.message import EmailMessage
from typing import Any

import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError

from countersign.approvals import Approvals
from countersign.audit import AuditLog
from countersign.binding import normalize_output, render_data, resolve_refs, resolve_step
from countersign.execute import compensation_steps, idempotency_key
from countersign.kernel import CountersignError, Plan, PlanStep, content_hash
from countersign.registry import Registry
from countersign.signer import KeyLookup, VerifiedPlan, verify_signed_plan
from countersign.storage import Database, IdempotencyLedger, PlanStore

from .http import http_call
from .models import CompensateCall, FinishCall, ReconcileCall, RedeemCall, StepCall

__all__ = ["PLAN_STATUS", "DurableActivities"]

#: a durable run's outcome → the plan's status in the PlanStore (the same statuses as
#: interactive execution; the precise outcome is in the ``durable_finished`` audit row)
PLAN_STATUS = {
    "booked": "completed",
    "completed": "completed",
    "rejected": "rejected",
    "approval_timeout": "rejected",
    "cancelled": "failed",
    "budget_exhausted": "failed",
    "failed": "failed",
}


def _app_error(e: CountersignError) -> ApplicationError:
    return ApplicationError(e.message, type=e.code, non_retryable=not e.retryable)


class DurableActivities:
    """The activities, bound to one database, key ring, registry and deployment settings."""

    def __init__(
        self, db: Database, *, keys: KeyLookup, registry: Registry, settings: Mapping[str, str]
    ) -> None:
        self.db = db
        self.keys = keys
        self.registry = registry
        self.settings = dict(settings)
        self.audit = AuditLog()
        self.ledger = IdempotencyLedger(db, audit=self.audit)
        self.approvals = Approvals(db, audit=self.audit)
        self.plans = PlanStore(db)

    def _verified(self, signed: Mapping[str, Any]) -> VerifiedPlan:
        try:
            return verify_signed_plan(signed, keys=self.keys)
        except CountersignError as e:
            with self.db.tx() as c:
                self.audit.append(
                    c,
                    {
                        "kind": "signature_refused",
                        "status": "refused",
                        "actor": "durable",
                        "reason": e.code,
                    },
                )
            raise _app_error(e) from e

    def _attempt_ledger(self) -> IdempotencyLedger:
        """The ledger with a lease as long as this activity attempt may run: when Temporal gives
        up on an attempt (worker lost), the next attempt finds the lease expired and learns the
        truth at once — nothing sent (take over) or sent (``unknown``, wait for a person)."""
        timeout = activity.info().start_to_close_timeout
        if timeout is None:
            return self.ledger
        return IdempotencyLedger(
            self.db, audit=self.audit, lease_s=max(1.0, timeout.total_seconds())
        )

    def _audit(self, **entry: Any) -> None:
        with self.db.tx() as c:
            self.audit.append(c, entry)

    @activity.defn(name="verify_plan")
    def verify_plan(self, signed: dict[str, Any]) -> str:
        """Verify the signed plan (refused and audited if it does not hold); its plan_hash."""
        v = self._verified(signed)
        self.plans.save_signed(v.plan, v.envelope, v.plan_hash, v.canonical)
        return v.plan_hash

    @activity.defn(name="poll")
    def poll(self, call: StepCall) -> Any:
        """One read of the watched op (a GET per its binding); its normalized output."""
        v = self._verified(call.signed)
        step = v.plan.step(call.step)
        try:
            args = {
                **resolve_refs(step.args, _int_keys(call.outputs), call.choices),
                **call.args_override,
            }
            node = resolve_step(step.model_copy(update={"args": args}), self.registry)
            req = http_call(node, render_data(node, args, self.settings))
            r = httpx.request(
                req.method, req.url, params=req.params, headers=req.headers, timeout=30
            )
        except CountersignError as e:
            raise _app_error(e) from e
        except httpx.HTTPError as e:
            raise ApplicationError(
                f"poll failed: {type(e).__name__}", type="poll_unavailable"
            ) from e
        if r.status_code >= 500:
            raise ApplicationError(f"poll answered {r.status_code}", type="poll_unavailable")
        return normalize_output(
            self.registry.op(step.uses, step.call).output,
            {"statusCode": r.status_code, "body": r.text},
            args,
        )

    @activity.defn(name="redeem_gate")
    def redeem_gate(self, call: RedeemCall) -> Any:
        """Spend the gate token (bound to plan hash, gate, user, scopes); the person's choice."""
        v = self._verified(call.signed)
        needed = sorted(
            {
                sc
                for s in v.plan.graph
                if not s.dry_run and s.gate_id is None
                for sc in self.registry.op(s.uses, s.call).scopes
            }
        )
        try:
            return self.approvals.redeem(
                call.token,
                plan_id=v.plan.plan_id,
                plan_hash=v.plan_hash,
                gate_id=call.gate_id,
                user_id=call.user_id,
                required_scopes=needed,
            ).choice
        except CountersignError as e:
            raise _app_error(e) from e

    @activity.defn(name="reject_gate")
    def reject_gate(self, call: RedeemCall) -> None:
        """Record the rejection (``token`` carries the reason here)."""
        v = self._verified(call.signed)
        try:
            self.approvals.reject(
                plan_id=v.plan.plan_id,
                plan_hash=v.plan_hash,
                gate_id=call.gate_id,
                user_id=call.user_id,
                reason=call.token[:500],
            )
        except CountersignError as e:
            raise _app_error(e) from e

    @activity.defn(name="write_step")
    def write_step(self, call: StepCall) -> dict[str, Any]:
        """Run a write step at most once (idempotency ledger); its result."""
        plan = self._verified(call.signed).plan
        step, args, key = self._write_key(plan, call)
        ledger = self._attempt_ledger()
        owner = f"temporal:{activity.info().workflow_id}"
        try:
            claim = ledger.claim(key, content_hash(args), owner=owner)
        except CountersignError as e:
            raise _app_error(e) from e
        if claim.state == "completed":
            self._step_status(plan, step.step, "done", claim.result)
            return dict(claim.result or {})
        self._step_status(plan, step.step, "running")
        self._audit(
            kind="step_started",
            status="running",
            actor=call.user_id,
            plan_id=plan.plan_id,
            step=step.step,
            op=f"{step.uses}.{step.call}",
        )
        t0 = time.perf_counter()
        ledger.mark_sent(key, owner=owner)
        try:
            result = self._perform(step, args, key)
        except _NotSentError as e:
            ledger.fail(key, str(e), owner=owner)
            raise ApplicationError(  # retryable: nothing was sent
                f"plan {plan.plan_id} step {step.step} ({step.uses}.{step.call}): {e}",
                type="provider_unreachable",
            ) from e
        except _RefusedError as e:
            ledger.fail(key, str(e), owner=owner)
            self._step_status(plan, step.step, "failed")
            self._audit(
                kind="step_failed",
                status="error",
                actor=call.user_id,
                plan_id=plan.plan_id,
                step=step.step,
                op=f"{step.uses}.{step.call}",
                reason=str(e)[:500],
            )
            raise ApplicationError(
                f"plan {plan.plan_id} step {step.step} ({step.uses}.{step.call}): {e}",
                type="provider_refused",
                non_retryable=True,
            ) from e
        except Exception as e:
            ledger.mark_unknown(key, f"{type(e).__name__}", owner=owner)
            raise ApplicationError(
                f"plan {plan.plan_id} step {step.step} ({step.uses}.{step.call}): outcome unknown "
                f"after {type(e).__name__}; check the provider, then resolve_step",
                type="idempotency_outcome_unknown",
                non_retryable=True,
            ) from e
        ledger.complete(key, result, owner=owner)
        self._step_status(plan, step.step, "done", result)
        self._audit(
            kind="step_finished",
            status="ok",
            actor=call.user_id,
            plan_id=plan.plan_id,
            step=step.step,
            op=f"{step.uses}.{step.call}",
            latency_ms=int((time.perf_counter() - t0) * 1000),
        )
        return result

    @staticmethod
    def _write_key(plan: Plan, call: StepCall) -> tuple[PlanStep, dict[str, Any], str]:
        """The step, its args with references resolved, and its idempotency key."""
        try:
            step = plan.step(call.step)
        except KeyError:
            raise ApplicationError(
                f"plan {plan.plan_id} has no step {call.step}",
                type="invalid_input",
                non_retryable=True,
            ) from None
        if step.dry_run or step.gate_id is not None:
            raise ApplicationError(
                f"plan {plan.plan_id} step {call.step} is not a write",
                type="invalid_input",
                non_retryable=True,
            )
        choices = dict(call.choices) or ({call.gate_id: call.choice} if call.gate_id else {})
        try:
            args = {
                **resolve_refs(step.args, _int_keys(call.outputs), choices),
                **call.args_override,
            }
        except CountersignError as e:
            raise _app_error(e) from e
        return step, args, idempotency_key(plan.plan_id, step.step, args)

    @activity.defn(name="reconcile_step")
    def reconcile_step(self, rc: ReconcileCall) -> None:
        """Settle a write whose outcome is unknown with a person's word (audited by the ledger):
        ``completed`` stores ``result`` so the step is answered from the ledger; ``failed`` lets
        the same idempotency key be claimed and sent again."""
        plan = self._verified(rc.call.signed).plan
        _, _, key = self._write_key(plan, rc.call)
        try:
            self.ledger.reconcile(key, outcome=rc.outcome, result=rc.result, actor=rc.call.user_id)
        except CountersignError as e:
            raise _app_error(e) from e

    @activity.defn(name="compensate")
    def compensate(self, call: CompensateCall) -> list[int]:
        """Run the registry's compensations of ``done`` writes, newest first, each at most once;
        the original steps that were undone."""
        v = self._verified(call.signed)
        plan = v.plan
        outputs = _int_keys(call.outputs)
        done = [
            (
                plan.step(d.step),
                resolve_refs(plan.step(d.step).args, outputs, call.choices),
                d.result,
            )
            for d in call.done
        ]
        undone: list[int] = []
        ledger = self._attempt_ledger()
        owner = f"temporal:{activity.info().workflow_id}"
        for comp in compensation_steps(plan, self.registry, done):
            original = 10_000 - comp.step
            key = idempotency_key(plan.plan_id, comp.step, comp.args)
            claim = ledger.claim(key, content_hash(comp.args), owner=owner)
            if claim.state != "completed":
                ledger.mark_sent(key, owner=owner)
                try:
                    result = self._perform(comp, comp.args, key)
                except Exception as e:
                    ledger.mark_unknown(key, type(e).__name__, owner=owner)
                    self._audit(
                        kind="step_compensated",
                        status="unknown",
                        actor=call.user_id,
                        plan_id=plan.plan_id,
                        step=original,
                        op=f"{comp.uses}.{comp.call}",
                    )
                    continue
                ledger.complete(key, result, owner=owner)
            self._audit(
                kind="step_compensated",
                status="ok",
                actor=call.user_id,
                plan_id=plan.plan_id,
                step=original,
                op=f"{comp.uses}.{comp.call}",
            )
            self._step_status(plan, original, "compensated")
            undone.append(original)
        return undone

    @activity.defn(name="finish_plan")
    def finish_plan(self, call: FinishCall) -> str:
        """Record how the durable run ended: the plan's status (as interactive execution sets it)
        and a ``durable_finished`` audit row with the precise outcome; the plan status set."""
        plan = self._verified(call.signed).plan
        status = PLAN_STATUS.get(call.outcome, "failed")
        try:
            self.plans.set_status(plan.plan_id, status)
        except CountersignError as e:
            raise _app_error(e) from e
        self._audit(
            kind="durable_finished",
            status=call.outcome,
            actor=call.user_id,
            plan_id=plan.plan_id,
            details={"workflow_id": call.workflow_id[:80], "plan_status": status},
        )
        return status

    def _step_status(self, plan: Plan, step: int, status: str, output: Any = None) -> None:
        """Report a durable step's progress where interactive steps report theirs."""
        if isinstance(output, Mapping) and "output" in output:
            output = output["output"]
        try:
            self.plans.set_step(plan.plan_id, step, status, output=output)
        except CountersignError as e:
            raise _app_error(e) from e

    def _perform(self, step: PlanStep, args: Mapping[str, Any], key: str) -> dict[str, Any]:
        node = resolve_step(step.model_copy(update={"args": dict(args)}), self.registry)
        if node.node_type == "n8n-nodes-base.emailSend":
            msg = EmailMessage()
            msg["From"] = self.settings["smtp_from"]
            msg["To"] = str(args["to"])
            msg["Subject"] = str(args["subject"])
            msg["Message-ID"] = f"<{content_hash(key)[:32]}@countersign>"
            msg.set_content(str(args["body"]))
            try:
                with smtplib.SMTP(
                    self.settings["smtp_host"], int(self.settings["smtp_port"]), timeout=30
                ) as s:
                    s.send_message(msg)
            except ConnectionRefusedError as e:
                raise _NotSentError(f"SMTP server refused the connection: {e}") from e
            return {"id": msg["Message-ID"], "status": 250}
        req = http_call(node, render_data(node, args, self.settings, idempotency_key=key))
        try:
            r = httpx.request(
                req.method,
                req.url,
                params=req.params,
                headers=req.headers,
                content=req.content,
                timeout=30,
            )
        except (httpx.ConnectError, httpx.ConnectTimeout) as e:
            raise _NotSentError(f"{type(e).__name__}") from e
        if 400 <= r.status_code < 500:
            raise _RefusedError(f"provider answered {r.status_code}")
        if r.status_code >= 500:
            raise RuntimeError(f"provider answered {r.status_code}")
        out = normalize_output(
            self.registry.op(step.uses, step.call).output,
            {"statusCode": r.status_code, "body": r.text},
            args,
        )
        ident = out.get("id") if isinstance(out, Mapping) else None
        return {"id": ident, "status": r.status_code, "output": out}


class _NotSentError(Exception):
    """The request provably never left."""


class _RefusedError(Exception):
    """The provider answered 4xx: no effect."""


def _int_keys(outputs: Mapping[str, Any]) -> dict[int, Any]:
    return {int(k): v for k, v in outputs.items()}
