"""ExecuteOrchestrator: run a signed plan's interactive writes, each at most once, only with proof.

Order (ExecuteOrchestrator LLD): verify the signature → the plan belongs to the caller → every gate
guarding a write is proven by a token redeemed now (every execute spends fresh tokens; a second
execute of a plan therefore needs a new approval, and its writes are then answered from the
ledger) → the world the person saw still holds (fresh reads vs. preview fingerprints; skipped when
resuming an execute that already wrote), under the resource locks its writes declare, held
until the gate's last write (``locks``) → each write goes through the one write sequence
(``steps.write_once``) on n8n → on a failed write, the writes done are undone, newest first
(``steps.undo_writes``); a failed step is classified and what the policy's failure table says
follows (``recovery``: retry a write the ledger says is ``failed``, else re-plan, compensate or
ask, on the event stream as ``step_failure``). Every decision is audited.

The checks of tokens and choices are in ``checks``, the reads again in ``views``, a gate's writes
and their undo in ``writing``, the reconciliation from n8n's records in ``reconcile``; this module
is the order they run in.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

from sqlalchemy import Connection
from ulid import ULID

from countersign.approvals import Approvals
from countersign.audit import AuditLog
from countersign.kernel import CountersignError, Plan, Policy, SignedPlan
from countersign.kernel.rules import failure_actions
from countersign.n8n.executions import RecordScan
from countersign.planwriter import PlanWriter
from countersign.registry import Registry
from countersign.signer import KeyLookup, VerifiedPlan
from countersign.steps import (
    N8nStepRunner,
    N8nTransport,
    OverBudgetError,
    StepTransport,
    StoreRecorder,
    WriteProtocol,
    check_budget,
    lock_keys,
    verify_or_audit,
)
from countersign.storage import Database, IdempotencyLedger, ResourceLocks
from countersign.workflowbuilder import CredentialRef

from .checks import GateChecks
from .core import WriteSpec, write_specs
from .policy import FactsSource, check_policy, write_facts
from .reconcile import Reconciler
from .recovery import Recovery
from .state import (
    ExecuteRefusedError,
    ExecuteReport,
    Progress,
    Run,
    gate_order,
    gate_reads,
    gate_step,
    progress_of,
)
from .views import Views
from .writing import GateWriter

__all__ = ["DurableStarter", "ExecuteRefusedError", "ExecuteReport", "ExecuteStores", "Executor"]

#: hands a verified plan's durable steps to Temporal for a user; the run it started or joined as
#: ``(workflow id, workflow type)`` (``countersign.durable.durable_starter``), both recorded on
#: ``handed_off`` so a decision reaches that workflow's class (Api SPEC, durable plans)
DurableStarter = Callable[[SignedPlan, str], Awaitable[tuple[str, str]]]


@dataclass(frozen=True)
class ExecuteStores:
    """The stores an Executor works on (passed in, or built over one database: ``over``)."""

    audit: AuditLog
    recorder: StoreRecorder
    approvals: Approvals
    ledger: IdempotencyLedger

    @classmethod
    def over(cls, db: Database, *, clock: Callable[[], datetime]) -> ExecuteStores:
        """The stores over ``db``, their rows stamped by ``clock``, one audit log for all."""
        audit = AuditLog(clock=clock)
        return cls(
            audit=audit,
            recorder=StoreRecorder(db, clock=clock),
            approvals=Approvals(db, clock=clock, audit=audit),
            ledger=IdempotencyLedger(db, clock=clock, audit=audit),
        )


def _done(progress: Progress, step: int) -> bool:
    return progress.get(step, ("pending", None))[0] == "done"


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
    #: hands a plan's durable steps to Temporal; without it, plans with durable writes are refused
    durable: DurableStarter | None = None
    #: writes a finished plan's outcomes to History and the PlanLibrary (PlanWriter SPEC)
    plan_writer: PlanWriter | None = None
    #: the stores to work on; None: ``ExecuteStores.over(db, clock=clock)``
    stores: ExecuteStores | None = None
    #: the resource locks a gate's writes hold (Storage ``ResourceLocks``); None: over ``db``
    locks: ResourceLocks | None = None
    #: how long a gate's writes wait for a resource another plan is writing to
    lock_wait_s: float = 15.0
    #: the policy in force: its gate rules are evaluated again on each write's arguments as
    #: sent (``execute.policy``); None: no rule is checked here (the plan's gates stand)
    policy: Policy | None = None
    #: the person's facts the policy's set tests read at the write (their contacts, read from
    #: the live store by whoever builds this executor); None: only ``self`` is known
    facts: FactsSource | None = None

    def __post_init__(self) -> None:
        stores = self.stores or ExecuteStores.over(self.db, clock=self.clock)
        self.audit = stores.audit
        self.recorder = stores.recorder
        self.approvals = stores.approvals
        self.ledger = stores.ledger
        self._locks = self.locks or ResourceLocks(self.db)
        self.writes = WriteProtocol(
            self.ledger,
            lambda row: self._audit(**row),
            owner=self.owner,
            clock=time.perf_counter,
            audit_in=self._in_claim,  # step_started and the step's status commit with the claim
        )

    def _audit(self, **entry: Any) -> None:
        with self.db.tx() as c:
            self.audit.append(c, entry)

    def _in_claim(self, c: Connection, row: dict[str, Any]) -> None:
        """Inside a write's claiming transaction: its ``step_started`` audit row and the step
        ``running`` — one transaction where the claim and the mark were two
        (``GateWriter.running_in_claim``); a compensation's number is no step of the plan and
        marks nothing."""
        self.audit.append(c, row)
        step = row.get("step")
        if row.get("kind") == "step_started" and isinstance(step, int):
            plans = self.recorder.plans
            plans.set_step(str(row["plan_id"]), step, "running", conn=c, must_exist=False)

    def _checks(self) -> GateChecks:
        return GateChecks(self.registry, self.approvals, self._audit)

    def _views(self) -> Views:
        return Views(self.recorder.plans, self._audit)

    def _writer(self) -> GateWriter:
        recovery = Recovery(failure_actions(self.policy), self._audit)
        return GateWriter(
            self.registry,
            self.writes,
            self.recorder.plans,
            self._audit,
            recovery,
            running_in_claim=True,
        )

    def _verified_for(self, document: SignedPlan | Mapping[str, Any], user_id: str) -> VerifiedPlan:
        """Signature, registry version and TTL (audited refusals), then the plan's owner."""
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
        return verified

    async def execute(
        self,
        document: SignedPlan | Mapping[str, Any],
        *,
        user_id: str,
        tokens: Mapping[str, str] | None = None,
    ) -> ExecuteReport:
        """Execute the plan's interactive writes (``document``: a ``SignedPlan``, or the signed
        plan as read, verified as written); how it ended is audited as ``execute_finished``
        (completed, waiting at a gate, failed), the plan's event log's end marker. See
        ``_execute`` for what is refused."""
        report = await self._execute(document, user_id=user_id, tokens=dict(tokens or {}))
        if report.status != "handed_off":  # a durable run reports its own end
            self._audit(
                kind="execute_finished",
                status=report.status,
                actor=user_id,
                plan_id=report.plan_id,
                op=report.waiting_gate,
                details={"compensated": report.compensated},
            )
            if self.plan_writer is not None and report.status in ("completed", "failed"):
                self.plan_writer.record(report.plan_id, audit=self._audit)
        return report

    async def _execute(
        self, document: SignedPlan | Mapping[str, Any], *, user_id: str, tokens: dict[str, str]
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
        verified = self._verified_for(document, user_id)
        plan = verified.plan
        # one transaction: the plan stored (if new), its steps read — what the preview saw
        # (outputs + fingerprints) and how far earlier executes got — and each token's choice
        with self.db.tx() as c:
            self.recorder.remember(verified, actor=user_id, conn=c)
            row = self.recorder.plans.get(plan.plan_id, conn=c)
            offered = {
                g: self.approvals.offered_choice(t, plan_id=plan.plan_id, gate_id=g, conn=c)
                for g, t in sorted(tokens.items())
            }
        specs = write_specs(plan, self.registry)
        durable = [w.step for w in specs if plan.step(w.step).mode != "interactive"]
        if durable:
            return await self._start_durable(verified, specs, durable, user_id, tokens)
        gates = self._interactive_gates(plan, specs, tokens)
        progress = progress_of(row)
        checks = self._checks()
        checks.in_view(plan, tokens, progress, user_id)
        preview_out, prints = self.recorder.plans.preview_in(row)
        checks.choices_before_spending(plan, offered, preview_out, progress, user_id)
        fresh = self._prove_gates(verified, specs, user_id, tokens)
        if any(w.reads for w in specs) and not prints:
            raise ExecuteRefusedError(
                f"plan {plan.plan_id} has not been previewed; preview it first"
            )
        run = self._run_of(verified, specs, gates, preview_out, progress, user_id)
        return await self._through_gates(run, specs, gates, fresh, progress, prints)

    def _interactive_gates(
        self, plan: Plan, specs: list[WriteSpec], tokens: Mapping[str, str]
    ) -> list[str]:
        """The gates to pass in order; refused without a transport, without writes, or with a
        token for a gate the plan does not have."""
        if self.transport is None:
            raise ExecuteRefusedError(
                f"plan {plan.plan_id}: no n8n transport configured for interactive steps"
            )
        gates = gate_order(plan, specs)
        if not gates:
            raise ExecuteRefusedError(f"plan {plan.plan_id} has no writes to execute")
        unknown = sorted(set(tokens) - set(gates))
        if unknown:
            raise ExecuteRefusedError(f"plan {plan.plan_id} has no gate {', '.join(unknown)}")
        return gates

    async def _through_gates(
        self,
        run: Run,
        specs: list[WriteSpec],
        gates: list[str],
        fresh: Mapping[str, Any],
        progress: Progress,
        prints: Mapping[int, str],
    ) -> ExecuteReport:
        """Pass the gates in the order of their steps: an approved one runs its writes, one
        written by an earlier execute is skipped, the first other one is where this execute
        waits (or, with nothing to wait for, is refused)."""
        plan = run.plan
        for g in gates:
            g_specs = [w for w in specs if w.gate_id == g]
            if g not in fresh:
                if all(_done(progress, w.step) for w in g_specs):
                    continue  # approved and written by an earlier execute
                if not run.done and not any(_done(progress, w.step) for w in specs):
                    self._needs_token(plan, run.user_id, g)
                return await self._views().wait_at(run, g, g_specs, prints)
            try:
                ended = await self._pass_gate(run, g, g_specs, fresh[g], progress, prints)
            except CountersignError as e:  # stale, a resource held, an unknown outcome
                self._writer().failure_seen(run, e)
                raise
            if ended is not None:
                return ended
        if not fresh:  # every write was done before, and nothing was approved now
            self._needs_token(plan, run.user_id, gates[0])
        self.recorder.plans.set_status(plan.plan_id, "completed")
        return run.report("completed")

    def _needs_token(self, plan: Plan, user_id: str, gate: str) -> NoReturn:
        self._checks().refused(plan, user_id, gate, "no approval token for the gate")
        raise ExecuteRefusedError(f"plan {plan.plan_id}: {gate} needs an approval token")

    def _prove_gates(
        self,
        verified: VerifiedPlan,
        specs: list[WriteSpec],
        user_id: str,
        tokens: Mapping[str, str],
    ) -> dict[str, Any]:
        """Redeem every token given (``GateChecks.prove``); the choice per approved gate."""
        return self._checks().prove(verified, specs, user_id, tokens)

    async def _check_stale(
        self,
        plan: Plan,
        runner: N8nStepRunner,
        reads: list[int],
        prints: Mapping[int, str],
        before: Mapping[int, Any],
        user_id: str,
    ) -> dict[int, Any]:
        """The staleness re-check (``Views.check_stale``), read again where the failure table
        retries what stopped it (``Recovery.again``); the fresh reads."""
        recovery = Recovery(failure_actions(self.policy), self._audit)
        return await recovery.again(
            lambda: self._views().check_stale(plan, runner, reads, prints, before, user_id),
            plan_id=plan.plan_id,
            actor=user_id,
        )

    # ---- durable plans --------------------------------------------------------------------------
    async def _start_durable(
        self,
        verified: VerifiedPlan,
        specs: list[WriteSpec],
        durable: list[int],
        user_id: str,
        tokens: Mapping[str, str],
    ) -> ExecuteReport:
        """Hand a plan with durable writes to Temporal; a gate approved when the run starts (a
        watcher's hold) has its token spent here, any other gate is decided on the workflow."""
        plan = verified.plan
        if tokens:
            order = gate_order(plan, specs)
            # a watcher's last gate decides what it found, on the running workflow
            at_start = order[:-1] if any(s.role == "Watcher" for s in plan.graph) else []
            unknown = sorted(set(tokens) - set(at_start))
            if unknown:
                raise ExecuteRefusedError(
                    f"plan {plan.plan_id}: {', '.join(unknown)} is not approved when the run "
                    f"starts (gates approved at start: {at_start or 'none'}); the running "
                    "workflow takes its decision"
                )
            fresh = self._prove_gates(verified, specs, user_id, tokens)
            for g, choice in fresh.items():
                self.recorder.plans.set_step(
                    plan.plan_id, gate_step(plan, g), "done", output={"choice": choice}
                )
        return await self._hand_off(verified, durable, user_id)

    async def _hand_off(
        self, verified: VerifiedPlan, durable: list[int], user_id: str
    ) -> ExecuteReport:
        """Durable writes: start (or join) the plan's Temporal workflow; its gates are approved
        there (``approve_gate`` update with a token), except a gate approved to start the run (a
        watcher's hold): its token was spent by ``_start_durable`` and the run checks the
        decision."""
        plan = verified.plan
        if self.durable is None:
            raise ExecuteRefusedError(
                f"plan {plan.plan_id}: durable write steps {durable} run on Temporal and no "
                "durable starter is configured"
            )
        workflow_id, workflow_type = await self.durable(verified.signed(), user_id)
        self.recorder.plans.set_status(plan.plan_id, "waiting")
        self._audit(
            kind="handed_off",
            status="ok",
            actor=user_id,
            plan_id=plan.plan_id,
            details={"workflow_id": workflow_id, "workflow_type": workflow_type, "steps": durable},
        )
        return ExecuteReport(plan.plan_id, "handed_off", workflow_id=workflow_id)

    # ---- one gate -------------------------------------------------------------------------------
    def _run_of(
        self,
        verified: VerifiedPlan,
        specs: list[WriteSpec],
        gates: list[str],
        preview_out: Mapping[int, Any],
        progress: Progress,
        user_id: str,
    ) -> Run:
        """This execute's state. Writes resolve their references from what the person saw at
        preview time, so a write's idempotency key never changes between a first execute and a
        resumed one; writes done by an earlier execute (an earlier gate) add their outputs, and
        gates passed before add their choices."""
        plan = verified.plan
        outputs: dict[int, Any] = dict(preview_out)
        choices: dict[str, Any] = {}
        for g in gates:
            status, out = progress.get(gate_step(plan, g), ("pending", None))
            if status == "done" and isinstance(out, Mapping):
                choices[g] = out.get("choice")
        for w in specs:
            status, out = progress.get(w.step, ("pending", None))
            if status == "done":
                outputs[w.step] = out
        if self.transport is None:  # pragma: no cover - the caller refused it already
            raise ExecuteRefusedError(f"plan {plan.plan_id}: no n8n transport configured")
        runner = N8nStepRunner(
            plan=plan,
            plan_hash=verified.plan_hash,
            registry=self.registry,
            transport=self.transport,
            settings=self.settings,
            credentials=self.credentials,
            choices=choices,  # filled in as gates are passed
            clock=self.clock,  # an event's DTSTAMP: when it is written
        )
        return Run(verified, runner, outputs, choices, user_id)

    async def _pass_gate(
        self,
        run: Run,
        gate: str,
        g_specs: list[WriteSpec],
        choice: Any,
        progress: Progress,
        prints: Mapping[int, str],
    ) -> ExecuteReport | None:
        """Run one approved gate's writes: the budget again with what earlier writes reported,
        the choice against what was offered (stored, then fresh and the clock), earlier writes
        of a gate decided again undone, the staleness check, then the writes. A report when the
        execute ends here (failed); None when the writes completed."""
        plan, user_id = run.plan, run.user_id
        self._within_budget(run, gate)
        self._policy_allows(run, gate, g_specs, choice)
        checks = self._checks()
        run.choices[gate] = checks.checked_choice(
            plan, gate, run.outputs, choice, user_id, now=None
        )
        writer = self._writer()
        undo = await writer.undo_if_redecided(run, gate, g_specs, progress)
        if undo is not None:
            return undo
        # the resources these writes touch are held from the re-check to the last write: a
        # second plan for the same calendar waits, then sees this one's event in its re-check;
        # what is asked of Postgres under the lock goes on the lock's connection
        keys = lock_keys(plan, [w.step for w in g_specs], self.registry, run.outputs, run.choices)
        async with self._locks.hold(keys, wait_s=self.lock_wait_s) as lock_conn:
            held = lock_conn if self._locks.db is self.db else None  # locks on another database
            resumed = writer.started(
                plan, [plan.step(w.step) for w in g_specs], run.outputs, run.choices, conn=held
            )
            if not resumed:  # the choice again, against the fresh reads and the clock
                reads = gate_reads(g_specs)
                seen = await self._check_stale(
                    plan, run.runner, reads, prints, run.outputs, user_id
                )
                run.choices[gate] = checks.checked_choice(
                    plan, gate, {**run.outputs, **seen}, choice, user_id, now=self.clock()
                )
            # the gate passed: its step done with the choice and the plan executing, one statement
            self.recorder.plans.pass_gate(
                plan.plan_id, gate_step(plan, gate), output={"choice": run.choices[gate]}, conn=held
            )
            return await writer.run(run, g_specs, progress, prints)

    def _policy_allows(self, run: Run, gate: str, g_specs: list[WriteSpec], choice: Any) -> None:
        """The gate rules again on the writes' arguments (``execute.policy``; audited)."""
        if self.policy is None:
            return

        def refused(reason: str, step: int, op: str) -> None:
            self._audit(
                kind="execute_refused",
                status="refused",
                actor=run.user_id,
                plan_id=run.plan.plan_id,
                step=step,
                op=op,
                reason="policy_refused",
                details={"why": reason[:300]},
            )

        check_policy(
            run.plan,
            gate,
            [w.step for w in g_specs],
            run.outputs,
            {**run.choices, gate: choice},
            policy=self.policy,
            refused=refused,
            facts=write_facts(self.policy, run.plan.intent.user_id, self.facts),
        )

    def _within_budget(self, run: Run, gate: str) -> None:
        """``check_budget`` with what earlier writes reported; a refusal is audited."""
        try:
            check_budget(run.plan, self.registry, gate, run.outputs)
        except OverBudgetError as e:
            self._audit(
                kind="execute_refused",
                status="refused",
                actor=run.user_id,
                plan_id=run.plan.plan_id,
                step=e.step,
                op=gate,
                reason=e.code,
                details={"limit": e.limit, "total": e.total},
            )
            raise

    # ---- reconciliation -------------------------------------------------------------------------
    async def reconcile(
        self,
        document: SignedPlan | Mapping[str, Any],
        *,
        user_id: str,
        settle_after_s: float = 30.0,
        scan: RecordScan | None = None,
    ) -> dict[int, str]:
        """Settle the plan's writes whose outcome is ``unknown`` from what n8n recorded
        (``execute.reconcile``, ``countersign.n8n.executions``): the execution of the step's
        workflow that carried the key — found by the send time in the ledger and the plan id,
        step and argument hash in its trigger body, however many executions came after — says
        whether the provider answered and how. ``failed`` only on positive evidence: the
        execution stopped before the node that sends, or n8n's records provably cover the send
        ``settle_after_s`` after it and none carries the key. Anything else stays ``unknown``
        for a person (audited ``reconcile_unsettled`` with the reason). Settlements are audited
        by the ledger; returns ``{step: completed | failed | unknown}``.
        """
        verified = self._verified_for(document, user_id)
        if not isinstance(self.transport, N8nTransport):
            raise ExecuteRefusedError("reconciliation reads n8n's executions: no n8n transport")
        reconciler = Reconciler(
            self.registry,
            self.ledger,
            self.recorder.plans,
            self._audit,
            self.credentials,
            self.clock,
        )
        return await reconciler.reconcile(
            self.transport.client,
            verified,
            user_id=user_id,
            scan=replace(scan or RecordScan(), settle=timedelta(seconds=settle_after_s)),
        )
