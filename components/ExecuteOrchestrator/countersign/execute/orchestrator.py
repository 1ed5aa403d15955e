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
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from ulid import ULID

from countersign.approvals import Approvals
from countersign.audit import AuditLog
from countersign.binding import normalize_output, resolve_refs
from countersign.kernel import (
    BindingError,
    CountersignError,
    ExecuteResult,
    ExecuteWrapper,
    Plan,
    PlanStep,
    ascii_digits,
    content_hash,
)
from countersign.planwriter import PlanWriter
from countersign.registry import Registry
from countersign.signer import KeyLookup, VerifiedPlan
from countersign.steps import (
    Attempt,
    ChoiceError,
    N8nStepRunner,
    N8nTransport,
    OverBudgetError,
    Replay,
    StepFailedError,
    StepTransport,
    StoreRecorder,
    WriteFailedError,
    WriteProtocol,
    check_budget,
    check_choice,
    classify,
    compensation_steps,
    fingerprint,
    gate_offer,
    idempotency_key,
    run_dag,
    verify_or_audit,
)
from countersign.storage import Database, IdempotencyLedger, OutcomeUnknownError
from countersign.workflowbuilder import CredentialRef, build_workflow_for_step

from .core import (
    Change,
    StaleWorldError,
    WriteSpec,
    ancestors,
    stale_changes,
    write_specs,
    writes_before_gate,
)
from .records import ExecutionSource, KeyRef, Lookup, RecordScan, find_execution, read_node

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
    #: ``waiting``: the next gate to approve, and what it guards, read afresh
    waiting_gate: str | None = None
    gate_preview: dict[str, Any] | None = None
    #: ``failed``: what changed in the reads the failed write depended on (old and new values)
    stale: list[Change] = field(default_factory=list)


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
    #: writes a finished plan's outcomes to History and the PlanLibrary (issue 15.5)
    plan_writer: PlanWriter | None = None

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
            audit_in=self.audit.append,  # step_started commits with the claim
        )

    def _audit(self, **entry: Any) -> None:
        with self.db.tx() as c:
            self.audit.append(c, entry)

    def _refused(self, plan: Plan, user_id: str, gate: str, reason: str, **details: Any) -> None:
        """Audit an execute refused at ``gate`` before anything of it ran."""
        self._audit(
            kind="execute_refused",
            status="refused",
            actor=user_id,
            plan_id=plan.plan_id,
            op=gate,
            reason=reason,
            details=details,
        )

    def _verified_for(self, document: Any, user_id: str) -> VerifiedPlan:
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
        self, document: Any, *, user_id: str, tokens: Mapping[str, str] | None = None
    ) -> ExecuteReport:
        """Execute the plan's interactive writes; how it ended is audited as ``execute_finished``
        (completed, waiting at a gate, failed), the plan's event log's end marker. See
        ``_execute`` for what is refused."""
        report = await self._execute(document, user_id=user_id, tokens=tokens)
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
        verified = self._verified_for(document, user_id)
        plan = verified.plan
        self.recorder.remember(verified, actor=user_id)
        specs = write_specs(plan, self.registry)
        durable = [w.step for w in specs if plan.step(w.step).mode != "interactive"]
        if durable:
            return await self._start_durable(verified, document, specs, durable, user_id, tokens)
        if self.transport is None:
            raise ExecuteRefusedError(
                f"plan {plan.plan_id}: no n8n transport configured for interactive steps"
            )
        store = self.recorder.plans
        gates = _gate_order(plan, specs)
        if not gates:
            raise ExecuteRefusedError(f"plan {plan.plan_id} has no writes to execute")
        unknown = sorted(set(tokens or {}) - set(gates))
        if unknown:
            raise ExecuteRefusedError(f"plan {plan.plan_id} has no gate {', '.join(unknown)}")
        # one read of the plan's steps gives both what the preview saw (outputs + fingerprints)
        # and how far earlier executes got (one transaction instead of two)
        row = store.get(plan.plan_id)
        progress = _progress(row)
        self._gates_in_view(plan, tokens or {}, progress, user_id)
        preview_out, prints = store.preview_in(row)
        self._choices_before_spending(plan, tokens or {}, preview_out, progress, user_id)
        fresh = self._prove_gates(verified, specs, user_id, tokens or {})
        if any(w.reads for w in specs) and not prints:
            raise ExecuteRefusedError(
                f"plan {plan.plan_id} has not been previewed; preview it first"
            )
        run = self._run_of(verified, specs, gates, preview_out, progress, user_id)
        for g in gates:
            g_specs = [w for w in specs if w.gate_id == g]
            if g not in fresh:
                if all(progress.get(w.step, ("pending",))[0] == "done" for w in g_specs):
                    continue  # approved and written by an earlier execute
                if not run.done and not any(
                    progress.get(w.step, ("pending",))[0] == "done" for w in specs
                ):
                    self._refused(plan, user_id, g, "no approval token for the gate")
                    raise ExecuteRefusedError(f"plan {plan.plan_id}: {g} needs an approval token")
                return await self._wait_at(run, g, g_specs, prints)
            ended = await self._pass_gate(run, g, g_specs, fresh[g], progress, prints)
            if ended is not None:
                return ended
        if not fresh:  # every write was done before, and nothing was approved now
            self._refused(plan, user_id, gates[0], "no approval token for the gate")
            raise ExecuteRefusedError(f"plan {plan.plan_id}: {gates[0]} needs an approval token")
        store.set_status(plan.plan_id, "completed")
        return ExecuteReport(
            plan.plan_id, "completed", [run.wrappers[k] for k in sorted(run.wrappers)]
        )

    async def _start_durable(
        self,
        verified: VerifiedPlan,
        document: Any,
        specs: list[WriteSpec],
        durable: list[int],
        user_id: str,
        tokens: Mapping[str, str] | None,
    ) -> ExecuteReport:
        """Hand a plan with durable writes to Temporal; a gate approved when the run starts (a
        watcher's hold) has its token spent here, any other gate is decided on the workflow."""
        plan = verified.plan
        if tokens:
            order = _gate_order(plan, specs)
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
                    plan.plan_id, _gate_step(plan, g), "done", output={"choice": choice}
                )
        return await self._hand_off(verified, document, durable, user_id)

    def _run_of(
        self,
        verified: VerifiedPlan,
        specs: list[WriteSpec],
        gates: list[str],
        preview_out: Mapping[int, Any],
        progress: Mapping[int, tuple[str, Any]],
        user_id: str,
    ) -> _Run:
        """This execute's state. Writes resolve their references from what the person saw at
        preview time, so a write's idempotency key never changes between a first execute and a
        resumed one; writes done by an earlier execute (an earlier gate) add their outputs, and
        gates passed before add their choices."""
        plan = verified.plan
        outputs: dict[int, Any] = dict(preview_out)
        choices: dict[str, Any] = {}
        for g in gates:
            status, out = progress.get(_gate_step(plan, g), ("pending", None))
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
        )
        return _Run(verified, runner, outputs, choices, user_id)

    async def _pass_gate(
        self,
        run: _Run,
        gate: str,
        g_specs: list[WriteSpec],
        choice: Any,
        progress: dict[int, tuple[str, Any]],
        prints: Mapping[int, str],
    ) -> ExecuteReport | None:
        """Run one approved gate's writes: the budget again with what earlier writes reported,
        the choice against what was offered (stored, then fresh and the clock), earlier writes
        of a gate decided again undone, the staleness check, then the writes. A report when the
        execute ends here (failed); None when the writes completed."""
        plan, user_id = run.verified.plan, run.user_id
        try:
            check_budget(plan, self.registry, gate, run.outputs)
        except OverBudgetError as e:
            self._audit(
                kind="execute_refused",
                status="refused",
                actor=user_id,
                plan_id=plan.plan_id,
                step=e.step,
                op=gate,
                reason=e.code,
                details={"limit": e.limit, "total": e.total},
            )
            raise
        run.choices[gate] = self._checked_choice(plan, gate, run.outputs, choice, user_id, now=None)
        undo = await self._undo_if_redecided(run, gate, g_specs, progress)
        if undo is not None:
            return undo
        resumed = any(
            self._started(plan, plan.step(w.step), run.outputs, run.choices) for w in g_specs
        )
        if not resumed:  # the choice again, against the fresh reads and the clock
            g_reads = sorted({r for w in g_specs for r in w.reads})
            seen = await self._check_stale(plan, run.runner, g_reads, prints, run.outputs, user_id)
            run.choices[gate] = self._checked_choice(
                plan, gate, {**run.outputs, **seen}, choice, user_id, now=self.clock()
            )
        self.recorder.plans.set_step(
            plan.plan_id, _gate_step(plan, gate), "done", output={"choice": run.choices[gate]}
        )
        return await self._run_writes(run, g_specs, progress, prints)

    async def _hand_off(
        self, verified: VerifiedPlan, document: Any, durable: list[int], user_id: str
    ) -> ExecuteReport:
        """Durable writes: start (or join) the plan's Temporal workflow; its gates are approved
        there (``approve_gate`` update with a token), except a gate approved to start the run (a
        watcher's hold): its token was spent by ``_execute`` and the run checks the decision."""
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

    # ---- reconciliation -------------------------------------------------------------------------
    async def reconcile(
        self,
        document: Any,
        *,
        user_id: str,
        settle_after_s: float = 30.0,
        scan: RecordScan | None = None,
    ) -> dict[int, str]:
        """Settle the plan's writes whose outcome is ``unknown`` from what n8n recorded
        (``countersign.execute.records``): the execution of the step's workflow that carried
        the key — found by the send time in the ledger and the plan id, step and argument hash
        in its trigger body, however many executions came after — says whether the provider
        answered and how. ``failed`` only on positive evidence: the execution stopped before
        the node that sends, or n8n's records provably cover the send ``settle_after_s`` after
        it and none carries the key. Anything else stays ``unknown`` for a person (audited
        ``reconcile_unsettled`` with the reason). Settlements are audited by the ledger;
        returns ``{step: completed | failed | unknown}``.
        """
        verified = self._verified_for(document, user_id)
        if not isinstance(self.transport, N8nTransport):
            raise ExecuteRefusedError("reconciliation reads n8n's executions: no n8n transport")
        scan = replace(scan or RecordScan(), settle=timedelta(seconds=settle_after_s))
        out: dict[int, str] = {}
        for row in self.ledger.unknown_keys(verified.plan.plan_id):
            step = _reconcilable(verified.plan, str(row["key"]))
            if step is not None:  # compensation keys are settled by a person
                out[step.step] = await self._reconcile_key(
                    self.transport.client, verified, step, row, scan, user_id
                )
        return out

    async def _reconcile_key(
        self,
        client: ExecutionSource,
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
            client,
            workflow_name=str(wf.workflow["name"]),
            key=ref,
            now=self.clock(),
            scan=scan,
        )
        verdict, result, reason = self._verdict(step, lookup)
        if verdict == "completed":
            self.ledger.reconcile(key, outcome="completed", result=result, actor=lookup.reason)
            self.recorder.plans.set_step(plan.plan_id, step.step, "done", output=result["output"])
        elif verdict == "failed":
            self.ledger.reconcile(key, outcome="failed", actor=lookup.reason)
        else:
            self._audit(
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
        verdict = classify(
            attempt, natural_key=op.idempotency is not None and op.idempotency.via == "natural_key"
        )
        result = {
            "output": output,
            "status": attempt.status,
            "deduplicated": verdict == "deduplicated",
            "id": output.get("id") if isinstance(output, Mapping) else None,
        }
        settled = "completed" if verdict == "deduplicated" else verdict
        return settled, result, f"{lookup.reason}: the provider answered {attempt.status}"

    # ---- gates ----------------------------------------------------------------------------------
    def _prove_gates(
        self,
        verified: VerifiedPlan,
        specs: list[WriteSpec],
        user_id: str,
        tokens: Mapping[str, str],
    ) -> dict[str, Any]:
        """Redeem every token given (all before anything runs: one bad token and nothing is
        written); the person's choice per approved gate."""
        plan = verified.plan
        choices: dict[str, Any] = {}
        for gate in _gate_order(plan, specs):
            token = tokens.get(gate)
            if token is None:
                continue
            needed = sorted(
                {
                    s
                    for w in specs
                    if w.gate_id == gate
                    for s in self.registry.op(plan.step(w.step).uses, plan.step(w.step).call).scopes
                }
            )
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

    async def _wait_at(
        self, run: _Run, gate: str, g_specs: list[WriteSpec], prints: Mapping[int, str]
    ) -> ExecuteReport:
        """Stop before ``gate``: read afresh what it guards (the reads its writes depend on), show
        it with the results of the writes already done, and keep those fingerprints as what the
        person approves next (the staleness check of the next execute compares against them)."""
        plan = run.verified.plan
        store = self.recorder.plans
        reads = sorted({r for w in g_specs for r in w.reads})
        fresh = await run_dag(plan, reads, run.runner.run, outputs=run.outputs) if reads else {}
        fresh = {n: fresh[n] for n in reads}
        if fresh:
            before, _ = store.preview_of(plan.plan_id)
            store.save_preview(
                plan.plan_id,
                {**before, **fresh},
                {**prints, **{n: fingerprint(o) for n, o in fresh.items()}},
            )
        guarded = {w.step for w in g_specs}
        done = {
            n: run.outputs[n]
            for n in sorted(run.outputs)
            if n not in fresh and n in _ancestors_of(plan, guarded) and n not in prints
        }
        store.set_status(plan.plan_id, "waiting")
        self._audit(
            kind="gate_waiting",
            status="waiting",
            actor=run.user_id,
            plan_id=plan.plan_id,
            op=gate,
            details={"reads": reads, "writes_done": sorted(done)},
        )
        return ExecuteReport(
            plan.plan_id,
            "waiting",
            [run.wrappers[k] for k in sorted(run.wrappers)],
            waiting_gate=gate,
            gate_preview={
                "gate": gate,
                "guards": sorted(guarded),
                "reads": {str(n): o for n, o in fresh.items()},
                "done": {str(n): o for n, o in done.items()},
            },
        )

    # ---- staleness ------------------------------------------------------------------------------
    async def _check_stale(
        self,
        plan: Plan,
        runner: N8nStepRunner,
        reads: list[int],
        prints: Mapping[int, str],
        before: Mapping[int, Any],
        user_id: str,
    ) -> dict[int, Any]:
        """The fresh reads when nothing the writes depend on moved; ``StaleWorldError`` else."""
        if not reads:
            return {}
        # read directly (no n8n execution for a plain HTTP read, in-process for a computation):
        # the same requests and the same normalization as the preview's
        # a read after a write (the cart the shop holds) waits for that write's output
        done = {n: v for n, v in before.items() if n not in reads}
        fresh = await runner.read_fresh(reads, outputs=done)
        changes = stale_changes(prints, before, fresh)
        if changes:
            # a read after a gate (the cart the shop holds) is not run again by a preview: what
            # it says now is shown in the refusal and becomes what the next approval is held to
            later = {
                n: fresh[n]
                for n in reads
                if n in fresh and any(plan.step(a).gate_id for a in ancestors(plan, n))
            }
            if later:
                self.recorder.plans.save_preview(
                    plan.plan_id, later, {n: fingerprint(o) for n, o in later.items()}
                )
            self.recorder.plans.set_status(plan.plan_id, "stale")
            self._audit(
                kind="execute_refused",
                status="stale",
                actor=user_id,
                plan_id=plan.plan_id,
                reason="world changed since the preview",
                details={"changes": [c.summary() for c in changes]},
            )
            raise StaleWorldError(plan.plan_id, changes)
        return {n: fresh[n] for n in reads if n in fresh}

    def _checked_choice(
        self,
        plan: Plan,
        gate: str,
        seen: Mapping[int, Any],
        choice: Any,
        user_id: str,
        *,
        now: datetime | None,
    ) -> Any:
        """The canonical choice if ``gate`` offers it given ``seen`` (GLOBAL_SPEC §8, the choice
        at a gate); ``ChoiceError`` (audited, nothing written) otherwise."""
        try:
            return check_choice(gate_offer(plan, self.registry, gate, seen), choice, now=now)
        except ChoiceError as e:
            self._refused(plan, user_id, gate, e.code, field=e.field)
            raise

    async def _undo_if_redecided(
        self,
        run: _Run,
        gate: str,
        g_specs: list[WriteSpec],
        progress: dict[int, tuple[str, Any]],
    ) -> ExecuteReport | None:
        """A gate decided again with another choice after its writes ran (the person picked
        another item once the price moved): what those writes did is undone first — newest
        first, each compensation through the ledger — so only the new choice is written and a
        later gate reviews one cart, not two. Returns a failed report if something could not be
        undone (nothing new is written then); None otherwise."""
        plan = run.verified.plan
        status, out = progress.get(_gate_step(plan, gate), ("pending", None))
        before = out.get("choice") if status == "done" and isinstance(out, Mapping) else None
        if status != "done" or content_hash(before) == content_hash(run.choices[gate]):
            return None
        done = self._earlier_writes(
            run, progress, only={w.step for w in g_specs}, choices={**run.choices, gate: before}
        )
        undone = await self._compensate(run.verified, run.runner, done, run.user_id)
        for step, _, _ in done:
            if step.step in undone:
                self.recorder.plans.set_step(plan.plan_id, step.step, "compensated")
                progress[step.step] = ("compensated", None)
                run.outputs.pop(step.step, None)
        self._audit(
            kind="gate_redecided",
            status="ok" if len(undone) == len(done) else "failed",
            actor=run.user_id,
            plan_id=plan.plan_id,
            op=gate,
            details={"undone": sorted(undone), "writes": sorted(s.step for s, _, _ in done)},
        )
        if len(undone) == len(done):
            return None
        self.recorder.plans.set_status(plan.plan_id, "failed")
        return ExecuteReport(plan.plan_id, "failed", compensated=sorted(undone))

    def _choices_before_spending(
        self,
        plan: Plan,
        tokens: Mapping[str, str],
        preview_out: Mapping[int, Any],
        progress: Mapping[int, tuple[str, Any]],
        user_id: str,
    ) -> None:
        """Each token's choice is checked against what was offered before any token is spent, so
        a refused choice leaves every token and every gate's decision as it was."""
        seen = {
            **preview_out,
            **{n: out for n, (st, out) in progress.items() if st == "done" and out is not None},
        }
        for g in sorted(tokens):
            found, choice = self.approvals.offered_choice(
                tokens[g], plan_id=plan.plan_id, gate_id=g
            )
            if found:
                self._checked_choice(plan, g, seen, choice, user_id, now=None)

    def _gates_in_view(
        self,
        plan: Plan,
        tokens: Mapping[str, str],
        progress: Mapping[int, tuple[str, Any]],
        user_id: str,
    ) -> None:
        """A gate whose step depends on an earlier gate's writes is approved only after those
        writes ran (ARCHITECTURE §3 inv. 3): a token for it given before then is refused before
        any token is spent or anything runs (audited)."""
        for g in sorted(tokens):
            pending = [
                w
                for w in writes_before_gate(plan, self.registry, g)
                if progress.get(w, ("pending", None))[0] != "done"
            ]
            if not pending:
                continue
            self._refused(plan, user_id, g, "gate_not_in_view", pending_writes=pending)
            raise ExecuteRefusedError(
                f"plan {plan.plan_id}: {g} guards what steps {pending} write, and they have not "
                f"run yet; execute the earlier gate first, then approve {g} with its review in view"
            )

    async def _changes_after_failure(
        self, run: _Run, g_specs: list[WriteSpec], prints: Mapping[int, str]
    ) -> list[Change]:
        """After a failed write: did the world move under it? (reported, never raised)"""
        reads = sorted({r for w in g_specs for r in w.reads})
        if not reads:
            return []
        try:
            fresh = await run.runner.read_fresh(reads, outputs=run.outputs)
        except CountersignError:
            return []
        return stale_changes(prints, run.outputs, {n: fresh[n] for n in reads})

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
        run: _Run,
        g_specs: list[WriteSpec],
        progress: Mapping[int, tuple[str, Any]],
        prints: Mapping[int, str],
    ) -> ExecuteReport | None:
        """Run one gate's writes (each through the write protocol). On a failed write: undo
        every write of the plan done so far (newest first), look again at what the writes
        depended on, and return the failed report; None when all completed."""
        plan = run.verified.plan
        store = self.recorder.plans
        store.set_status(plan.plan_id, "executing")

        async def one(step: PlanStep, known: Mapping[int, Any]) -> Any:
            args = self._args(step, known, run.choices)
            op = self.registry.op(step.uses, step.call)
            ticket = self.writes.claim(
                plan_id=plan.plan_id,
                step=step.step,
                op=f"{step.uses}.{step.call}",
                args=args,
                actor=run.user_id,
                natural_key=op.idempotency is not None and op.idempotency.via == "natural_key",
            )
            if isinstance(ticket, Replay):
                run.wrappers[step.step] = self._wrapper(step, args, ticket.result, replay=True)
                run.done.append((step, args, ticket.result))
                return _output(ticket.result)
            try:
                prepared = await run.runner.prepare(step, known, idempotency_key=ticket.key)
            except CountersignError as e:
                raise self.writes.abandon(ticket, e.message) from e
            self.writes.sending(ticket)
            outcome = self.writes.settle(ticket, await run.runner.send_write(prepared))
            store.set_step(plan.plan_id, step.step, "done", output=outcome.result["output"])
            run.done.append((step, args, outcome.result))
            run.wrappers[step.step] = self._wrapper(
                step, args, outcome.result, replay=outcome.verdict == "deduplicated"
            )
            return outcome.result["output"]

        try:
            run.outputs.update(
                await run_dag(plan, [w.step for w in g_specs], one, outputs=run.outputs)
            )
        except (StepFailedError, WriteFailedError) as e:
            earlier = self._earlier_writes(run, progress)
            compensated = await self._compensate(
                run.verified, run.runner, earlier + run.done, run.user_id
            )
            changes = await self._changes_after_failure(run, g_specs, prints)
            if changes:
                self._audit(
                    kind="step_failed_world_changed",
                    status="stale",
                    actor=run.user_id,
                    plan_id=plan.plan_id,
                    step=e.step,
                    details={"changes": [c.summary() for c in changes]},
                )
            store.set_status(plan.plan_id, "failed")
            run.wrappers[e.step] = ExecuteWrapper(
                provider=plan.step(e.step).uses, status="error", step=e.step, error=e.reason[:300]
            )
            return ExecuteReport(
                plan.plan_id,
                "failed",
                [run.wrappers[k] for k in sorted(run.wrappers)],
                compensated,
                stale=changes,
            )
        return None

    def _earlier_writes(
        self,
        run: _Run,
        progress: Mapping[int, tuple[str, Any]],
        *,
        only: set[int] | None = None,
        choices: Mapping[str, Any] | None = None,
    ) -> list[tuple[PlanStep, dict[str, Any], Any]]:
        """Writes an earlier execute completed (an earlier gate), for compensation: all of them,
        or ``only`` these steps; their args resolved with ``choices`` (default: this run's — a
        gate decided again passes the choice those writes were made with)."""
        mine = {s.step for s, _, _ in run.done}
        out: list[tuple[PlanStep, dict[str, Any], Any]] = []
        for n in sorted(progress):
            st, value = progress[n]
            step = run.verified.plan.step(n)
            if st != "done" or n in mine or step.gate_id is not None or step.dry_run:
                continue
            if (only is not None and n not in only) or self.registry.op(
                step.uses, step.call
            ).safety != "write":
                continue
            args = self._args(step, run.outputs, run.choices if choices is None else choices)
            out.append((step, args, {"output": value, "id": _ident(value)}))
        return out

    def _audit_compensation(
        self,
        plan: Plan,
        comp: PlanStep,
        original: int,
        user_id: str,
        status: str,
        reason: str | None,
    ) -> None:
        self.writes.compensated(
            plan_id=plan.plan_id,
            original=original,
            op=f"{comp.uses}.{comp.call}",
            actor=user_id,
            status=status,
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


@dataclass
class _Run:
    """One execute call's state: what has been read and written, and the gates passed."""

    verified: VerifiedPlan
    runner: N8nStepRunner
    outputs: dict[int, Any]
    choices: dict[str, Any]
    user_id: str
    wrappers: dict[int, ExecuteWrapper] = field(default_factory=dict)
    done: list[tuple[PlanStep, dict[str, Any], Any]] = field(default_factory=list)


def _gate_order(plan: Plan, specs: list[WriteSpec]) -> list[str]:
    """The gates guarding writes, in the order of their steps."""
    return sorted({w.gate_id for w in specs}, key=lambda g: _gate_step(plan, g))


def _progress(row: Mapping[str, Any] | None) -> dict[int, tuple[str, Any]]:
    if row is None:
        return {}
    return {int(s["step"]): (str(s["status"]), s["output"]) for s in row["steps"]}


def _ident(output: Any) -> Any:
    return output.get("id") if isinstance(output, Mapping) else None


def _output(result: Any) -> Any:
    return result.get("output") if isinstance(result, Mapping) else result


def _ancestors_of(plan: Plan, steps: set[int]) -> set[int]:
    return set().union(*(ancestors(plan, n) for n in steps)) if steps else set()


def _gate_step(plan: Plan, gate: str) -> int:
    for s in plan.graph:
        if s.gate_id == gate:
            return s.step
    raise ExecuteRefusedError(f"plan {plan.plan_id} has no gate {gate}")


def _reconcilable(plan: Plan, key: str) -> PlanStep | None:
    """The plan step a ledger key belongs to (``plan_id:step:arg_hash``); ``None`` for a
    compensation's key (its step is not in the signed graph)."""
    step_no = key.split(":", 2)[1]
    if not ascii_digits(step_no) or not 1 <= int(step_no) <= len(plan.graph):
        return None
    return plan.step(int(step_no))
