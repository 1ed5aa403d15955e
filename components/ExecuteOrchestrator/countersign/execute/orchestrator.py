"""ExecuteOrchestrator: run a signed plan's interactive writes, each at most once, only with proof.

Order (ExecuteOrchestrator LLD): verify the signature → the plan belongs to the caller → every gate
guarding a write is proven by a token redeemed now (every execute spends fresh tokens; a second execute of
a plan therefore needs a new approval, and its writes are then answered from the ledger) → the world the person saw still holds (fresh reads vs. preview fingerprints; skipped
when resuming an execute that already wrote) → each write claims its idempotency key, runs on n8n,
records its result → on a failed write, compensations of the writes done, newest first. Every
decision is audited.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ulid import ULID

from countersign.approvals import Approvals
from countersign.audit import AuditLog
from countersign.binding import resolve_refs
from countersign.kernel import (
    BindingError,
    CountersignError,
    ExecuteResult,
    ExecuteWrapper,
    Plan,
    PlanStep,
)
from countersign.preview import (
    N8nStepRunner,
    StepFailedError,
    StepTransport,
    StoreRecorder,
    run_dag,
    verify_or_audit,
)
from countersign.registry import Registry
from countersign.signer import KeyLookup, VerifiedPlan
from countersign.steps import (
    Replay,
    WriteFailedError,
    WriteProtocol,
    compensation_steps,
    idempotency_key,
)
from countersign.storage import Database, IdempotencyLedger, OutcomeUnknownError
from countersign.workflowbuilder import CredentialRef

from .core import StaleWorldError, WriteSpec, stale_changes, write_specs

__all__ = ["ExecuteRefusedError", "ExecuteReport", "Executor"]


class ExecuteRefusedError(CountersignError):
    """The execute cannot start (wrong user, missing token, no preview, durable steps, …)."""

    code = "execute_refused"


@dataclass(frozen=True)
class ExecuteReport:
    """What an execute did."""

    plan_id: str
    status: str
    wrappers: list[ExecuteWrapper] = field(default_factory=list)
    compensated: list[int] = field(default_factory=list)
    workflow_id: str | None = None


@dataclass
class Executor:
    """Executes signed plans on n8n against the Postgres ledgers."""

    keys: KeyLookup
    registry: Registry
    transport: StepTransport | None
    db: Database
    settings: Mapping[str, str]
    credentials: Mapping[str, CredentialRef] = field(default_factory=dict)
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    #: who holds idempotency keys while writing; unique per Executor so two processes executing
    #: the same plan can never complete each other's keys
    owner: str = field(default_factory=lambda: f"executor-{ULID()}")
    #: hands a plan's durable steps to Temporal (``countersign.durable.durable_starter``); returns
    #: the workflow id. Without it, plans with durable writes are refused.
    durable: Callable[[dict[str, Any], str], Awaitable[str]] | None = None

    def __post_init__(self) -> None:
        self.audit = AuditLog(clock=self.clock)
        self.recorder = StoreRecorder(self.db, clock=self.clock)
        self.approvals = Approvals(self.db, clock=self.clock, audit=self.audit)
        self.ledger = IdempotencyLedger(self.db, clock=self.clock, audit=self.audit)
        self.writes = WriteProtocol(
            self.ledger,
            lambda row: self._audit(**row),
            owner=self.owner,
            clock=time.perf_counter,
        )

    def _audit(self, **entry: Any) -> None:
        with self.db.tx() as c:
            self.audit.append(c, entry)

    async def execute(
        self, document: Any, *, user_id: str, tokens: Mapping[str, str] | None = None
    ) -> ExecuteReport:
        """Execute the plan's interactive writes.

        Raises:
            SignatureError: refused and audited; nothing ran.
            PlanNotCurrentError: registry changed since signing, or the plan expired; refused
                and audited; nothing ran.
            ExecuteRefusedError: another user's plan, a missing token, no preview, durable writes.
            ApprovalError (subclasses): a token that does not prove the gate; nothing ran.
            StaleWorldError: what the writes depend on changed since the preview; nothing written.
            StepFailedError / OutcomeUnknownError: a write failed (compensated) or its outcome is
                unknown (waiting for reconciliation).
        """
        verified = verify_or_audit(
            document,
            keys=self.keys,
            recorder=self.recorder,
            actor=user_id,
            registry=self.registry,
            now=self.clock(),
        )
        plan = verified.plan
        if plan.intent.user_id != user_id:
            self._audit(
                kind="execute_refused",
                status="refused",
                actor=user_id,
                plan_id=plan.plan_id,
                reason="plan belongs to another user",
            )
            raise ExecuteRefusedError(f"plan {plan.plan_id} belongs to another user")
        self.recorder.remember(verified, actor=user_id)
        specs = write_specs(plan, self.registry)
        durable = [w.step for w in specs if plan.step(w.step).mode != "interactive"]
        if durable:
            return await self._hand_off(verified, document, durable, user_id)
        if self.transport is None:
            raise ExecuteRefusedError(
                f"plan {plan.plan_id}: no n8n transport configured for interactive steps"
            )
        choices = self._prove_gates(verified, specs, user_id, tokens or {})
        preview_out, prints = self.recorder.plans.preview_of(plan.plan_id)
        reads = sorted({r for w in specs for r in w.reads})
        if reads and not prints:
            raise ExecuteRefusedError(
                f"plan {plan.plan_id} has not been previewed; preview it first"
            )
        runner = N8nStepRunner(
            plan=plan,
            plan_hash=verified.plan_hash,
            registry=self.registry,
            transport=self.transport,
            settings=self.settings,
            credentials=self.credentials,
            choices=choices,
        )
        # Writes resolve their references from what the person saw at preview time, so the
        # idempotency key of a write never changes between a first execute and a resumed one.
        outputs: dict[int, Any] = {n: preview_out[n] for n in preview_out}
        resumed = any(self._started(plan, plan.step(w.step), outputs, choices) for w in specs)
        if reads and not resumed:
            await self._check_stale(plan, runner, reads, prints, preview_out, user_id)
        return await self._run_writes(verified, specs, runner, outputs, choices, user_id)

    async def _hand_off(
        self, verified: VerifiedPlan, document: Any, durable: list[int], user_id: str
    ) -> ExecuteReport:
        """Durable writes: start (or join) the plan's Temporal workflow; its gates are approved
        there (``approve_gate`` update with a token), so no token is spent here."""
        plan = verified.plan
        if self.durable is None:
            raise ExecuteRefusedError(
                f"plan {plan.plan_id}: durable write steps {durable} run on Temporal and no durable starter is configured"
            )
        workflow_id = await self.durable(verified.document(), user_id)
        self.recorder.plans.set_status(plan.plan_id, "waiting")
        self._audit(
            kind="handed_off",
            status="ok",
            actor=user_id,
            plan_id=plan.plan_id,
            details={"workflow_id": workflow_id, "steps": durable},
        )
        return ExecuteReport(plan.plan_id, "handed_off", workflow_id=workflow_id)

    # ---- gates ----------------------------------------------------------------------------------
    def _prove_gates(
        self,
        verified: VerifiedPlan,
        specs: list[WriteSpec],
        user_id: str,
        tokens: Mapping[str, str],
    ) -> dict[str, Any]:
        plan = verified.plan
        choices: dict[str, Any] = {}
        for gate in sorted({w.gate_id for w in specs}):
            needed = sorted(
                {
                    s
                    for w in specs
                    if w.gate_id == gate
                    for s in self.registry.op(plan.step(w.step).uses, plan.step(w.step).call).scopes
                }
            )
            token = tokens.get(gate)
            if token is None:
                self._audit(
                    kind="execute_refused",
                    status="refused",
                    actor=user_id,
                    plan_id=plan.plan_id,
                    op=gate,
                    reason="no approval token for the gate",
                )
                raise ExecuteRefusedError(f"plan {plan.plan_id}: {gate} needs an approval token")
            redeemed = self.approvals.redeem(
                token,
                plan_id=plan.plan_id,
                plan_hash=verified.plan_hash,
                gate_id=gate,
                user_id=user_id,
                required_scopes=needed,
            )
            choices[gate] = redeemed.choice
        return choices

    # ---- staleness ------------------------------------------------------------------------------
    async def _check_stale(
        self,
        plan: Plan,
        runner: N8nStepRunner,
        reads: list[int],
        prints: Mapping[int, str],
        before: Mapping[int, Any],
        user_id: str,
    ) -> None:
        fresh = await run_dag(plan, reads, runner.run)
        changes = stale_changes(prints, before, fresh)
        if changes:
            self.recorder.plans.set_status(plan.plan_id, "stale")
            self._audit(
                kind="execute_refused",
                status="stale",
                actor=user_id,
                plan_id=plan.plan_id,
                reason="world changed since the preview",
                details={"changed_steps": [c.step for c in changes]},
            )
            raise StaleWorldError(plan.plan_id, changes)

    # ---- writes ---------------------------------------------------------------------------------
    @staticmethod
    def _args(
        step: PlanStep, outputs: Mapping[int, Any], choices: Mapping[str, Any]
    ) -> dict[str, Any]:
        resolved: dict[str, Any] = resolve_refs(step.args, outputs, choices)
        return resolved

    def _started(
        self, plan: Plan, step: PlanStep, outputs: Mapping[int, Any], choices: Mapping[str, Any]
    ) -> bool:
        """Has an earlier execute already claimed this write? (Then skip the staleness check:
        our own writes changed the world.)"""
        try:
            args = self._args(step, outputs, choices)
        except BindingError:
            return False  # it reads an earlier write's output: not claimable before that write
        return self.ledger.state(idempotency_key(plan.plan_id, step.step, args)) is not None

    async def _run_writes(
        self,
        verified: VerifiedPlan,
        specs: list[WriteSpec],
        runner: N8nStepRunner,
        outputs: dict[int, Any],
        choices: Mapping[str, Any],
        user_id: str,
    ) -> ExecuteReport:
        plan = verified.plan
        store = self.recorder.plans
        store.set_status(plan.plan_id, "executing")
        wrappers: dict[int, ExecuteWrapper] = {}
        done: list[tuple[PlanStep, dict[str, Any], Any]] = []

        async def one(step: PlanStep, known: Mapping[int, Any]) -> Any:
            args = self._args(step, known, choices)
            op = self.registry.op(step.uses, step.call)
            ticket = self.writes.claim(
                plan_id=plan.plan_id,
                step=step.step,
                op=f"{step.uses}.{step.call}",
                args=args,
                actor=user_id,
                natural_key=op.idempotency is not None and op.idempotency.via == "natural_key",
            )
            if isinstance(ticket, Replay):
                wrappers[step.step] = self._wrapper(step, args, ticket.result, replay=True)
                return ticket.result
            try:
                prepared = await runner.prepare(step, known, idempotency_key=ticket.key)
            except CountersignError as e:
                raise self.writes.abandon(ticket, e.message) from e
            self.writes.sending(ticket)
            outcome = self.writes.settle(ticket, await runner.send_write(prepared))
            store.set_step(plan.plan_id, step.step, "done", output=outcome.result["output"])
            done.append((step, args, outcome.result))
            wrappers[step.step] = self._wrapper(
                step, args, outcome.result, replay=outcome.verdict == "deduplicated"
            )
            return outcome.result

        steps = [w.step for w in specs]
        try:
            await run_dag(plan, steps, one, outputs=outputs)
        except (StepFailedError, WriteFailedError) as e:
            compensated = await self._compensate(verified, runner, done, user_id)
            store.set_status(plan.plan_id, "failed")
            wrappers[e.step] = ExecuteWrapper(
                provider=plan.step(e.step).uses, status="error", step=e.step, error=e.reason[:300]
            )
            return ExecuteReport(
                plan.plan_id, "failed", [wrappers[k] for k in sorted(wrappers)], compensated
            )
        store.set_status(plan.plan_id, "completed")
        return ExecuteReport(plan.plan_id, "completed", [wrappers[k] for k in sorted(wrappers)])

    def _audit_compensation(
        self,
        plan: Plan,
        comp: PlanStep,
        original: int,
        user_id: str,
        status: str,
        reason: str | None,
    ) -> None:
        self._audit(
            kind="step_compensated",
            status=status,
            actor=user_id,
            plan_id=plan.plan_id,
            step=original,
            op=f"{comp.uses}.{comp.call}",
            reason=reason,
        )

    def _wrapper(
        self, step: PlanStep, args: Mapping[str, Any], result: Any, *, replay: bool
    ) -> ExecuteWrapper:
        op = self.registry.op(step.uses, step.call)
        ext: str | None = None
        if (
            op.idempotency is not None
            and op.idempotency.via == "natural_key"
            and op.idempotency.field
        ):
            ext = str(args.get(op.idempotency.field))
        else:
            out = result.get("output") if isinstance(result, Mapping) else None
            if isinstance(out, Mapping):
                for k in ("id", "messageId", "ts"):
                    if out.get(k) is not None:
                        ext = str(out[k])
                        break
        return ExecuteWrapper(
            provider=step.uses,
            result=ExecuteResult(id=ext),
            step=step.step,
            status="skipped" if replay else "created",
        )

    async def _compensate(
        self,
        verified: VerifiedPlan,
        runner: N8nStepRunner,
        done: list[tuple[PlanStep, dict[str, Any], Any]],
        user_id: str,
    ) -> list[int]:
        plan = verified.plan
        undone: list[int] = []
        originals = {10_000 - s.step: s.step for s, _, _ in done}
        for comp in compensation_steps(plan, self.registry, done):
            original = originals[comp.step]
            ticket = self.writes.claim(
                plan_id=plan.plan_id,
                step=comp.step,
                op=f"{comp.uses}.{comp.call}",
                args=comp.args,
                actor=user_id,
            )
            if not isinstance(ticket, Replay):
                try:
                    prepared = await runner.prepare(comp, {}, idempotency_key=ticket.key)
                except CountersignError as e:
                    self.writes.abandon(ticket, e.message)
                    self._audit_compensation(plan, comp, original, user_id, "error", e.code)
                    continue
                self.writes.sending(ticket)
                try:
                    self.writes.settle(ticket, await runner.send_write(prepared))
                except (WriteFailedError, OutcomeUnknownError) as e:
                    status = "unknown" if isinstance(e, OutcomeUnknownError) else "error"
                    self._audit_compensation(plan, comp, original, user_id, status, e.code)
                    continue
            self._audit_compensation(plan, comp, original, user_id, "ok", None)
            undone.append(original)
        return undone
