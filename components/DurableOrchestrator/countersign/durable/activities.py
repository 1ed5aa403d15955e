"""Temporal activities: every I/O of the durable workflows (verify, poll, redeem, write, notify).

Thin: each wires an adapter (httpx, smtplib, the Postgres ledgers) to the shared cores. Our errors
become ``ApplicationError(type=<code>, non_retryable=not error.retryable)``; a write whose outcome
is unknown is never retried by Temporal (non-retryable), it waits for reconciliation.
"""

from __future__ import annotations

import smtplib
import socket
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from email.message import EmailMessage
from typing import Any

import httpx
from sqlalchemy import Connection
from temporalio import activity
from temporalio.exceptions import ApplicationError

from countersign.approvals import Approvals, ReceiptSigner
from countersign.audit import AuditLog, GroupCommitAuditWriter
from countersign.binding import normalize_output, render_data, resolve_refs, resolve_step
from countersign.kernel import (
    BindingError,
    CountersignError,
    Plan,
    PlanStep,
    content_hash,
    system_clock,
)
from countersign.planwriter import PlanWriter
from countersign.registry import Registry
from countersign.signer import KeyLookup, VerifiedPlan, verify_signed_plan
from countersign.steps import (
    Attempt,
    PlanNotCurrentError,
    Replay,
    WriteFailedError,
    WriteProtocol,
    check_current,
    compensation_steps,
    idempotency_key,
)
from countersign.steps.http import HttpCall, http_call, send
from countersign.storage import Database, IdempotencyLedger, OutcomeUnknownError, PlanStore

from .models import CompensateCall, FinishCall, ReconcileCall, RedeemCall, RejectCall, StepCall

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
    ) -> None:
        self.db = db
        #: the effective registry now (the shipped folder + API edits, ``steps.RegistryStore``):
        #: read again when a plan names another registry version than the one held, so a plan
        #: signed after an edit through the API runs without restarting the worker
        self.registry_source = registry_source
        #: writes a finished plan's outcomes to History and the PlanLibrary (issue 15.5)
        self.plan_writer = plan_writer
        self.clock = clock
        self.keys = keys
        self.registry = registry
        self.settings = dict(settings)
        self.audit = AuditLog(clock=system_clock)
        self.ledger = IdempotencyLedger(db, audit=self.audit, clock=system_clock)
        #: a rejection recorded here (a person's, or the approval timing out) is a signed receipt
        #: in the plan's chain when the worker has the service key (Approvals SPEC §4)
        self.approvals = Approvals(
            db, audit=self.audit, clock=system_clock, receipts=receipt_signer
        )
        self.plans = PlanStore(db, clock=system_clock)
        #: standalone audit rows of concurrent activities (a thread pool) share one commit each
        #: (issue 16: group commit; every caller still returns after its own row is durable)
        self.audit_writer = GroupCommitAuditWriter(db, log=self.audit)
        #: one client for every provider request (thread-safe): ``httpx.request`` built a client
        #: and its TLS context per call, ~40 ms of CPU per poll — the one-poll watcher's largest
        #: cost (LLD "Scale"); no keep-alive, so each request still opens its own connection and
        #: a write's "sent or not" reads exactly as before
        self.http = httpx.Client(limits=httpx.Limits(max_keepalive_connections=0))

    def _verified(self, signed: Mapping[str, Any]) -> VerifiedPlan:
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
    def verify_plan(self, signed: dict[str, Any]) -> str:
        """Verify the signed plan (refused and audited if it does not hold); its plan_hash."""
        v = self._verified(signed)

        def audit_signed(c: Connection) -> None:  # the first store and its row commit together
            self.audit.append(
                c,
                {
                    "kind": "plan_signed",
                    "status": "ok",
                    "actor": "durable",
                    "plan_id": v.plan.plan_id,
                    "details": {"plan_hash": v.plan_hash, "key": v.envelope.pubkey_id},
                },
            )

        self.plans.save_signed(v.plan, v.envelope, v.plan_hash, v.canonical, on_insert=audit_signed)
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
            r = send(req, client=self.http)
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
        """Run a write step at most once through the write protocol (``countersign.steps``); its
        result. Nothing sent → retryable ``provider_unreachable``; refused → non-retryable
        ``provider_refused``; may have happened → non-retryable ``idempotency_outcome_unknown``
        (the workflow waits for a person's ``resolve_step``)."""
        plan = self._verified(call.signed).plan
        step, args, _ = self._write_key(plan, call)
        op = self.registry.op(step.uses, step.call)
        where = f"plan {plan.plan_id} step {step.step} ({step.uses}.{step.call})"
        writes = self._writes()
        try:
            ticket = writes.claim(
                plan_id=plan.plan_id,
                step=step.step,
                op=f"{step.uses}.{step.call}",
                args=args,
                actor=call.user_id,
                natural_key=op.idempotency is not None and op.idempotency.via == "natural_key",
            )
        except CountersignError as e:
            raise _app_error(e) from e
        if isinstance(ticket, Replay):
            self._step_status(plan, step.step, "done", ticket.result)
            return dict(ticket.result or {})
        self._step_status(plan, step.step, "running")
        try:
            send = self._prepare(step, args, ticket.key)
        except CountersignError as e:  # could not even build the request: nothing left
            failed = writes.abandon(ticket, e.message)
            self._step_status(plan, step.step, "failed")
            raise ApplicationError(
                f"{where}: {failed.reason}", type=e.code, non_retryable=True
            ) from e
        writes.sending(ticket)
        try:
            done = writes.settle(ticket, send())
        except WriteFailedError as e:
            if not e.sent:  # retryable: nothing was sent; the next attempt claims the key again
                raise ApplicationError(f"{where}: {e.reason}", type="provider_unreachable") from e
            self._step_status(plan, step.step, "failed")
            raise ApplicationError(
                f"{where}: {e.reason}", type="provider_refused", non_retryable=True
            ) from e
        except OutcomeUnknownError as e:
            raise ApplicationError(
                f"{where}: {e.message}; check the provider, then resolve_step",
                type="idempotency_outcome_unknown",
                non_retryable=True,
            ) from e
        self._step_status(plan, step.step, "done", done.result)
        return done.result

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
        writes = self._writes()
        for comp in compensation_steps(plan, self.registry, done):
            original = 10_000 - comp.step
            op = f"{comp.uses}.{comp.call}"
            try:
                ticket = writes.claim(
                    plan_id=plan.plan_id, step=comp.step, op=op, args=comp.args, actor=call.user_id
                )
            except CountersignError as e:  # e.g. an earlier compensation's outcome is unknown
                self._compensation_row(plan, original, op, call.user_id, "unknown", e.code)
                continue
            if not isinstance(ticket, Replay):
                try:
                    send = self._prepare(comp, comp.args, ticket.key)
                except CountersignError as e:
                    writes.abandon(ticket, e.message)
                    self._compensation_row(plan, original, op, call.user_id, "error", e.code)
                    continue
                writes.sending(ticket)
                try:
                    writes.settle(ticket, send())
                except (WriteFailedError, OutcomeUnknownError) as e:
                    status = "unknown" if isinstance(e, OutcomeUnknownError) else "error"
                    self._compensation_row(plan, original, op, call.user_id, status, e.code)
                    continue
            self._compensation_row(plan, original, op, call.user_id, "ok", None)
            self._step_status(plan, original, "compensated")
            undone.append(original)
        return undone

    def _compensation_row(
        self, plan: Plan, original: int, op: str, actor: str, status: str, reason: str | None
    ) -> None:
        self._writes().compensated(
            plan_id=plan.plan_id,
            original=original,
            op=op,
            actor=actor,
            status=status,
            reason=reason,
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
        self._audit(
            kind="durable_finished",
            status=call.outcome,
            actor=call.user_id,
            plan_id=plan.plan_id,
            details={"workflow_id": call.workflow_id[:80], "plan_status": status},
        )
        if self.plan_writer is not None:
            self.plan_writer.record(plan.plan_id, audit=self._audit)
        return status

    def _step_status(self, plan: Plan, step: int, status: str, output: Any = None) -> None:
        """Report a durable step's progress where interactive steps report theirs."""
        if isinstance(output, Mapping) and "output" in output:
            output = output["output"]
        try:
            self.plans.set_step(plan.plan_id, step, status, output=output)
        except CountersignError as e:
            raise _app_error(e) from e

    def _prepare(self, step: PlanStep, args: Mapping[str, Any], key: str) -> Callable[[], Attempt]:
        """Build the step's request (any error here: nothing was sent); the one send, which
        reports what happened as an ``Attempt`` and never raises."""
        node = resolve_step(step.model_copy(update={"args": dict(args)}), self.registry)
        if node.node_type == "n8n-nodes-base.emailSend":
            msg = self._email(args, key)
            return lambda: self._send_mail(msg)
        req = http_call(node, render_data(node, args, self.settings, idempotency_key=key))
        output = self.registry.op(step.uses, step.call).output
        return lambda: self._send_http(req, output, args)

    def _email(self, args: Mapping[str, Any], key: str) -> EmailMessage:
        for name in ("smtp_from", "smtp_host", "smtp_port"):
            if not self.settings.get(name):
                raise BindingError(f"connector setting {name!r} is not configured")
        for name in ("to", "subject", "body"):
            if name not in args:
                raise BindingError(f"mail step needs the argument {name!r}")
        msg = EmailMessage()
        msg["From"] = self.settings["smtp_from"]
        msg["To"] = str(args["to"])
        msg["Subject"] = str(args["subject"])
        msg["Message-ID"] = f"<{content_hash(key)[:32]}@countersign>"
        msg.set_content(str(args["body"]))
        return msg

    def _send_mail(self, msg: EmailMessage) -> Attempt:
        try:
            s = smtplib.SMTP(
                self.settings["smtp_host"], int(self.settings["smtp_port"]), timeout=30
            )
        except (ConnectionRefusedError, socket.gaierror, TimeoutError) as e:
            return Attempt.not_sent(f"SMTP connect failed: {type(e).__name__}")
        except OSError as e:
            return Attempt.not_sent(f"SMTP connect failed: {type(e).__name__}")
        try:
            with s:
                s.send_message(msg)
        except (smtplib.SMTPRecipientsRefused, smtplib.SMTPSenderRefused) as e:
            return Attempt("refused", detail=f"SMTP refused: {type(e).__name__}")
        except smtplib.SMTPDataError as e:
            if 500 <= e.smtp_code < 600:  # permanent refusal of the message: not accepted
                return Attempt("refused", detail=f"SMTP answered {e.smtp_code}")
            return Attempt.lost(f"SMTP answered {e.smtp_code} to DATA")
        except Exception as e:  # the message may have been accepted
            return Attempt.lost(f"SMTP {type(e).__name__}")
        return Attempt("answered", output={"id": msg["Message-ID"]})

    def _send_http(self, req: HttpCall, output: Any, args: Mapping[str, Any]) -> Attempt:
        try:
            r = send(req, client=self.http)
        except (httpx.ConnectError, httpx.ConnectTimeout) as e:
            return Attempt.not_sent(f"{type(e).__name__}")
        except Exception as e:  # read timeout, dropped connection, …: may have arrived
            return Attempt.lost(f"{type(e).__name__}")
        try:
            out = normalize_output(output, {"statusCode": r.status_code, "body": r.text}, args)
        except CountersignError as e:
            return Attempt.lost(f"provider answered {r.status_code}, unreadable: {e.code}")
        return Attempt("answered", status=r.status_code, output=out)


_MISSING = object()


def _int_keys(outputs: Mapping[str, Any]) -> dict[int, Any]:
    return {int(k): v for k, v in outputs.items()}
