"""Temporal activities: every I/O of the durable workflows (verify, poll, redeem, write, notify).

Thin: each wires an adapter (the Postgres stores, ``steps.DirectSender`` for HTTP and SMTP) to the
shared cores; writes and their undo go through the one write sequence both runtimes use
(``steps.write_once`` / ``undo_writes``, StepRunner SPEC). Our errors become
``ApplicationError(type=<code>, non_retryable=not error.retryable)``; a write whose outcome is
unknown is never retried by Temporal (non-retryable), it waits for reconciliation.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError

from countersign.approvals import Approvals, ReceiptSigner
from countersign.audit import AuditLog, GroupCommitAuditWriter
from countersign.binding import normalize_output, render_data, resolve_refs, resolve_step
from countersign.kernel import CountersignError, Plan, PlanStep, Policy, SignedPlan, system_clock
from countersign.planwriter import PlanWriter
from countersign.registry import Registry
from countersign.signer import KeyLookup, VerifiedPlan, verify_signed_plan
from countersign.steps import (
    DirectSender,
    PlanNotCurrentError,
    StepMarks,
    StoreRecorder,
    Write,
    WriteFailedError,
    WriteProtocol,
    check_current,
    gate_scopes,
    idempotency_key,
    step_lock_key,
    undo_writes,
    write_once,
)
from countersign.steps.http import http_call, send
from countersign.storage import Database, IdempotencyLedger, OutcomeUnknownError, ResourceLocks

from .models import (
    CompensateCall,
    ConfirmCall,
    FinishCall,
    ReconcileCall,
    RedeemCall,
    RejectCall,
    StepCall,
)
from .policy import FactsSource, policy_refusal, write_facts

__all__ = ["PLAN_STATUS", "DurableActivities", "DurableStores"]

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
    "refused": "failed",
}


def _app_error(e: CountersignError) -> ApplicationError:
    return ApplicationError(e.message, type=e.code, non_retryable=not e.retryable)


@dataclass(frozen=True)
class DurableStores:
    """The stores the activities work on (passed in, or built over one database: ``over``)."""

    audit: AuditLog
    ledger: IdempotencyLedger
    approvals: Approvals
    recorder: StoreRecorder
    #: standalone audit rows of concurrent activities (a thread pool) share one commit each
    #: (group commit; every caller still returns after its own row is durable)
    audit_writer: GroupCommitAuditWriter

    @classmethod
    def over(cls, db: Database, *, receipts: ReceiptSigner | None = None) -> DurableStores:
        """The stores over ``db`` on the system clock. A rejection recorded here (a person's, or
        the approval timing out) is a signed receipt in the plan's chain when ``receipts`` (the
        service key) is given (Approvals SPEC §4)."""
        audit = AuditLog(clock=system_clock)
        return cls(
            audit=audit,
            ledger=IdempotencyLedger(db, audit=audit, clock=system_clock),
            approvals=Approvals(db, audit=audit, clock=system_clock, receipts=receipts),
            recorder=StoreRecorder(db, clock=system_clock),
            audit_writer=GroupCommitAuditWriter(db, log=audit),
        )


class DurableActivities:
    """The activities, bound to one database, key ring, registry and deployment settings."""

    def __init__(
        self,
        db: Database,
        *,
        keys: KeyLookup,
        registry: Registry,
        settings: Mapping[str, str],
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        plan_writer: PlanWriter | None = None,
        registry_source: Callable[[], Registry] | None = None,
        receipt_signer: ReceiptSigner | None = None,
        stores: DurableStores | None = None,
        sender: DirectSender | None = None,
        policy: Policy | None = None,
        facts: FactsSource | None = None,
    ) -> None:
        self.db = db
        #: the person's facts the rules' set tests read at each write (their contacts, from the
        #: live store); None: only ``self`` is known
        self.facts = facts
        #: the policy whose gate rules every write is checked against before it is sent (the
        #: deployment's policy file, as the API's executor; default rules without one)
        self.policy = policy or Policy()
        #: the effective registry now (the shipped folder + API edits, ``RegistryStore``): read
        #: again when a plan names another registry version than the one held, so a plan signed
        #: after an edit through the API runs without restarting the worker
        self.registry_source = registry_source
        #: writes a finished plan's outcomes to History and the PlanLibrary (PlanWriter SPEC)
        self.plan_writer = plan_writer
        self.clock = clock
        self.keys = keys
        # ``receipt_signer`` signs the rejections of the stores built here; stores passed in
        # bring their own Approvals
        stores = stores or DurableStores.over(db, receipts=receipt_signer)
        self.audit = stores.audit
        self.ledger = stores.ledger
        self.approvals = stores.approvals
        self.recorder = stores.recorder
        self.plans = stores.recorder.plans
        self.audit_writer = stores.audit_writer
        #: sends the writes (HTTP and SMTP from this process, ``steps.DirectSender``); its one
        #: HTTP client also sends the polls
        self.sender = sender or DirectSender(registry, dict(settings))

    @property
    def registry(self) -> Registry:
        """The registry the activities run against (the sender's)."""
        return self.sender.registry

    @registry.setter
    def registry(self, registry: Registry) -> None:
        self.sender = replace(self.sender, registry=registry)

    @property
    def settings(self) -> dict[str, str]:
        """The deployment's connector settings (the sender's)."""
        return dict(self.sender.settings)

    @settings.setter
    def settings(self, settings: Mapping[str, str]) -> None:
        self.sender = replace(self.sender, settings=dict(settings))

    def _verified(self, signed: SignedPlan | Mapping[str, Any]) -> VerifiedPlan:
        """The signed plan, verified, signed against the registry this worker holds and within
        its TTL (``countersign.steps.check_current``); else audited and non-retryable."""
        try:
            verified = verify_signed_plan(signed, keys=self.keys)
            signed_with = verified.plan.meta.registry_version
            if signed_with != self.registry.version and self.registry_source is not None:
                # the API may have edited the registry since this worker started: follow it (a
                # plan signed against an older registry stays refused, as the API refuses it)
                self.registry = self.registry_source()
            check_current(verified.plan, registry_version=self.registry.version, now=self.clock())
        except CountersignError as e:
            kind = "plan_refused" if isinstance(e, PlanNotCurrentError) else "signature_refused"
            self._audit(kind=kind, status="refused", actor="durable", reason=e.code)
            raise ApplicationError(e.message, type=e.code, non_retryable=True) from e
        return verified

    def _attempt_ledger(self) -> IdempotencyLedger:
        """The ledger with a lease as long as this activity attempt may run: when Temporal gives
        up on an attempt (worker lost), the next attempt finds the lease expired and learns the
        truth at once — nothing sent (take over) or sent (``unknown``, wait for a person)."""
        timeout = activity.info().start_to_close_timeout
        if timeout is None:
            return self.ledger
        return IdempotencyLedger(
            self.db, audit=self.audit, lease_s=max(1.0, timeout.total_seconds()), clock=system_clock
        )

    def _audit(self, **entry: Any) -> None:
        self.audit_writer.append(entry)

    @activity.defn(name="verify_plan")
    def verify_plan(self, signed: SignedPlan) -> str:
        """Verify the signed plan (refused and audited if it does not hold) and store it with
        its ``plan_signed`` row, as preview and execute do (``StoreRecorder.remember``); its
        plan_hash."""
        v = self._verified(signed)
        self.recorder.remember(v, actor="durable")
        return v.plan_hash

    @activity.defn(name="poll")
    def poll(self, call: StepCall) -> Any:
        """One read of the watched op (a GET per its binding); its normalized output."""
        v = self._verified(call.signed)
        step = v.plan.step(call.step)
        self._signed_args_only(v.plan, step, call)
        try:
            args = resolve_refs(step.args, _int_keys(call.outputs), call.choices)
            node = resolve_step(step.model_copy(update={"args": args}), self.registry)
            req = http_call(node, render_data(node, args, self.settings))
            r = send(req, client=self.sender.client)
        except CountersignError as e:
            raise _app_error(e) from e
        except httpx.HTTPError as e:
            raise ApplicationError(
                f"poll failed: {type(e).__name__}", type="poll_unavailable"
            ) from e
        if r.status_code >= 500:
            raise ApplicationError(f"poll answered {r.status_code}", type="poll_unavailable")
        out = normalize_output(
            self.registry.op(step.uses, step.call).output,
            {"statusCode": r.status_code, "body": r.text},
            args,
        )
        # the plan's event log hears of every poll and whether it found something
        found = isinstance(out, Mapping) and any(isinstance(x, list) and x for x in out.values())
        # what was found is what the person will choose from at the gate (the chat card)
        self._audit(
            kind="watcher_polled",
            status="found" if found else "nothing",
            actor="worker",
            plan_id=v.plan.plan_id,
            step=step.step,
            op=f"{step.uses}.{step.call}",
            **({"details": {"found": out}} if found else {}),
        )
        return out

    @activity.defn(name="redeem_gate")
    def redeem_gate(self, call: RedeemCall) -> Any:
        """Spend the gate token (bound to plan hash, gate, user and the scopes of the writes the
        gate guards: ``steps.gate_scopes``); the person's choice."""
        v = self._verified(call.signed)
        try:
            return self.approvals.redeem(
                call.token,
                plan_id=v.plan.plan_id,
                plan_hash=v.plan_hash,
                gate_id=call.gate_id,
                user_id=call.user_id,
                # the scopes of the writes this gate guards, as interactive execution asks
                required_scopes=gate_scopes(v.plan, self.registry, call.gate_id),
            ).choice
        except CountersignError as e:
            raise _app_error(e) from e

    @activity.defn(name="confirm_gate")
    def confirm_gate(self, call: ConfirmCall) -> Any:
        """The approval the API redeemed where the token arrived, named by the spent token's
        hash (``Approvals.redeemed``: bound to plan hash, gate and user, spent, within the
        token's lifetime; a refusal is audited); the person's choice."""
        v = self._verified(call.signed)
        try:
            return self.approvals.redeemed(
                call.approval,
                plan_id=v.plan.plan_id,
                plan_hash=v.plan_hash,
                gate_id=call.gate_id,
                user_id=call.user_id,
            ).choice
        except CountersignError as e:
            raise _app_error(e) from e

    @activity.defn(name="require_gate")
    def require_gate(self, call: RedeemCall) -> Any:
        """A gate approved before the run started (its token spent by the execute that handed the
        plan over, e.g. the watcher's hold): the recorded decision must be this user's approval
        of this plan; the choice. Refused (non-retryable, audited) otherwise."""
        v = self._verified(call.signed)
        d = self.approvals.decision(v.plan.plan_id, call.gate_id)
        if d is None or d.decision != "approved" or d.user_id != call.user_id:
            found = "no decision" if d is None else f"{d.decision} by {d.user_id}"
            self._audit(
                kind="execute_refused",
                status="refused",
                actor=call.user_id,
                plan_id=v.plan.plan_id,
                op=call.gate_id,
                reason="gate_not_approved",
                details={"found": found},
            )
            raise ApplicationError(
                f"plan {v.plan.plan_id}: {call.gate_id} guards what this run writes before the "
                f"person is asked again, and it was not approved by {call.user_id} ({found}); "
                "approve it and execute with its token",
                type="gate_not_approved",
                non_retryable=True,
            )
        return d.choice

    @activity.defn(name="reject_gate")
    def reject_gate(self, call: RejectCall) -> None:
        """Record the person's rejection of the gate, with its reason (a signed receipt)."""
        v = self._verified(call.signed)
        try:
            self.approvals.reject(
                plan_id=v.plan.plan_id,
                plan_hash=v.plan_hash,
                gate_id=call.gate_id,
                user_id=call.user_id,
                reason=call.reason[:500],
            )
        except CountersignError as e:
            raise _app_error(e) from e

    def _writes(self) -> WriteProtocol:
        """The write protocol for this activity attempt (its lease, its owner)."""
        return WriteProtocol(
            self._attempt_ledger(),
            lambda row: self._audit(**row),
            owner=f"temporal:{activity.info().workflow_id}",
            clock=time.perf_counter,
        )

    @activity.defn(name="write_step")
    def write_step(self, call: StepCall) -> dict[str, Any]:
        """Run a write step at most once through the write sequence (``steps.write_once`` over
        this worker's ``DirectSender``); its ledger result. Nothing sent → retryable
        ``provider_unreachable``; refused → non-retryable ``provider_refused``; may have happened
        → non-retryable ``idempotency_outcome_unknown`` (the workflow waits for a person's
        ``resolve_step``). A write the policy's gate rules deny, or gate without the plan's gate
        naming the rule, is refused before anything is held or sent: non-retryable
        ``policy_refused``, audited (``execute_refused``)."""
        plan = self._verified(call.signed).plan
        step, args, _ = self._write_key(plan, call)
        self._policy_allows(plan, step, args, call.user_id)
        write = Write.of(plan.plan_id, step, args, self.registry)
        try:
            # one sequence for both runtimes: run here on a private event loop of this activity's
            # thread (the sender's sends block that thread only)
            outcome = asyncio.run(self._write_held(write, plan, call.user_id))
        except CountersignError as e:
            raise _write_error(f"plan {plan.plan_id} step {step.step} ({write.op})", e) from e
        return dict(outcome.result or {})

    async def _write_held(self, write: Write, plan: Plan, actor: str) -> Any:
        """``write_once`` holding the resource the op declares (``lock``, filled with the
        write's args): the interactive runtime's gates hold the same keys on the same database,
        so the two runtimes never write one resource at once (ExecuteOrchestrator LLD)."""
        op = self.registry.op(write.step.uses, write.step.call)
        key = step_lock_key(op.lock, write.args)
        async with ResourceLocks(self.db).hold([key] if key else []):
            return await write_once(
                self._writes(), self.sender, write, actor=actor, mark=self._marks(plan)
            )

    def _write_key(self, plan: Plan, call: StepCall) -> tuple[PlanStep, dict[str, Any], str]:
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
        self._signed_args_only(plan, step, call)
        try:
            args = resolve_refs(step.args, _int_keys(call.outputs), choices)
        except CountersignError as e:
            raise _app_error(e) from e
        return step, args, idempotency_key(plan.plan_id, step.step, args)

    def _policy_allows(self, plan: Plan, step: PlanStep, args: dict[str, Any], actor: str) -> None:
        """The gate rules again on the write's arguments as sent (``policy.policy_refusal``, the
        interactive executor's rules); refused and audited as the interactive executor audits."""
        facts = write_facts(self.policy, plan.intent.user_id, self.facts)
        why = policy_refusal(plan, step, args, self.policy, facts=facts)
        if why is None:
            return
        self._audit(
            kind="execute_refused",
            status="refused",
            actor=actor,
            plan_id=plan.plan_id,
            step=step.step,
            op=f"{step.uses}.{step.call}",
            reason="policy_refused",
            details={"why": why[:300]},
        )
        raise ApplicationError(
            f"plan {plan.plan_id}: {why}", type="policy_refused", non_retryable=True
        )

    def _signed_args_only(self, plan: Plan, step: PlanStep, call: StepCall) -> None:
        """A step runs with its signed arguments, nothing else (GLOBAL_SPEC §13 inv. 3d): an
        override is accepted only where it equals what was signed; any change to what runs is a
        new plan revision, signed and approved again. Refused and audited."""
        changed = sorted(
            k for k, v in call.args_override.items() if step.args.get(k, _MISSING) != v
        )
        if not changed:
            return
        self._audit(
            kind="unsigned_change_refused",
            status="refused",
            actor=call.user_id,
            plan_id=plan.plan_id,
            step=step.step,
            op=f"{step.uses}.{step.call}",
            details={"args": changed},
        )
        raise ApplicationError(
            f"plan {plan.plan_id} step {step.step}: arguments {changed} differ from the signed "
            "plan; a change to what runs needs a new plan revision, signed and approved",
            type="unsigned_change",
            non_retryable=True,
        )

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
        """Run the registry's compensations of ``done`` writes, newest first, each at most once
        (``steps.undo_writes``); the original steps that were undone (each marked
        ``compensated``)."""
        plan = self._verified(call.signed).plan
        outputs = _int_keys(call.outputs)
        done = [
            (
                plan.step(d.step),
                resolve_refs(plan.step(d.step).args, outputs, call.choices),
                d.result,
            )
            for d in call.done
        ]
        return asyncio.run(
            undo_writes(
                self._writes(),
                self.sender,
                plan,
                self.registry,
                done,
                actor=call.user_id,
                mark=self._marks(plan),
            )
        )

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
        wid = call.workflow_id[:80]
        if not self._finished_before(plan.plan_id, wid):
            self._audit(
                kind="durable_finished",
                status=call.outcome,
                actor=call.user_id,
                plan_id=plan.plan_id,
                details={"workflow_id": wid, "plan_status": status},
            )
        if self.plan_writer is not None:
            self.plan_writer.record(plan.plan_id, audit=self._audit)
        return status

    def _finished_before(self, plan_id: str, workflow_id: str) -> bool:
        """Whether this run's end is already in the plan's log: ``finish_plan`` runs as a local
        activity, which runs again when the workflow task that ran it fails (e.g. a cancellation
        arrived meanwhile), so it is at least once — the ``durable_finished`` row is written
        once (its recent rows, read through the AuditLog)."""
        with self.db.tx() as c:
            rows = self.audit.rows(c, plan_id=plan_id, limit=_RECENT_ROWS)
        return any(
            r.get("kind") == "durable_finished"
            and isinstance(r.get("details"), Mapping)
            and r["details"].get("workflow_id") == workflow_id
            for r in rows
        )

    def _marks(self, plan: Plan) -> StepMarks:
        """Where the write sequence records a durable step's progress (where interactive steps
        report theirs)."""

        def mark(step: int, status: str, output: Any) -> None:
            try:
                self.plans.set_step(plan.plan_id, step, status, output=output)
            except CountersignError as e:
                raise _app_error(e) from e

        return mark


def _write_error(where: str, e: CountersignError) -> ApplicationError:
    """What Temporal does with a write that did not complete: a request that could not be built
    is final (its code); nothing sent is retried (the next attempt claims the key again);
    refused is final; an outcome that is not known waits for a person; anything the claim
    raised keeps its own code."""
    if isinstance(e, WriteFailedError):
        cause = e.__cause__
        if isinstance(cause, CountersignError):  # abandoned before sending: nothing to retry
            return ApplicationError(f"{where}: {e.reason}", type=cause.code, non_retryable=True)
        if not e.sent:
            return ApplicationError(f"{where}: {e.reason}", type="provider_unreachable")
        return ApplicationError(f"{where}: {e.reason}", type="provider_refused", non_retryable=True)
    if isinstance(e, OutcomeUnknownError):
        return ApplicationError(
            f"{where}: {e.message}; check the provider, then resolve_step",
            type=e.code,
            non_retryable=True,
        )
    return _app_error(e)


_MISSING = object()
#: how far back ``finish_plan`` looks for its own row (a run's end is among the plan's last rows)
_RECENT_ROWS = 20


def _int_keys(outputs: Mapping[str, Any]) -> dict[int, Any]:
    return {int(k): v for k, v in outputs.items()}
