"""Settle an interactive execute that was cut short (ExecuteOrchestrator SPEC 10): a write whose
outcome is ``unknown`` (n8n or the API died mid-write), or an execute that never recorded its end.

``Settler.settle`` works from evidence only, never by sending a write again to find out:

1. each ``unknown`` key from n8n's record of the execution that carried it (``execute.reconcile``);
2. what n8n cannot prove, from the provider itself read by the write's natural key
   (``execute.probes``: the CalDAV event's ``.ics`` by UID) — a read, never a re-send;
3. then the plan goes on: with every write of a spent gate settled, the missing writes run under
   the approval that was spent for this run (``finish``; the ledger answers the done ones, so
   nothing is written twice); when something stays unknown, or the plan can no longer run (its
   signature's TTL passed, the registry changed), the execute ends ``unknown`` with
   ``needs_attention``: what is known per write, and the person is offered ``finish`` (once the
   unknown writes are settled) or ``undo`` (compensate what was done, newest first).

Every decision is audited; the end is the ``execute_finished`` row, so the plan never stays
``running``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from countersign.kernel import CountersignError, Plan, PlanStep
from countersign.n8n.executions import RecordScan
from countersign.signer import VerifiedPlan, verify_signed_plan
from countersign.steps import N8nTransport, PlanNotCurrentError, check_current, idempotency_key
from countersign.storage import PlanEvents

from .core import WriteSpec, write_specs
from .orchestrator import Executor
from .probes import Probe, default_probes
from .reconcile import Reconciler, reconcilable
from .state import (
    ExecuteRefusedError,
    ExecuteReport,
    Progress,
    Run,
    gate_order,
    gate_step,
    progress_of,
)
from .writing import resolved_args

__all__ = ["Settlement", "Settler"]


@dataclass(frozen=True)
class Settlement:
    """What is known of a cut-short execute, and what the person may do."""

    plan_id: str
    #: completed | waiting | failed | undone | needs_attention | in_progress
    status: str
    #: step → done | unknown | failed | pending | in_progress | compensated
    writes: dict[int, str] = field(default_factory=dict)
    #: step → why its outcome is what it is (the evidence, or why there is none)
    evidence: dict[int, str] = field(default_factory=dict)
    #: what the person may do: ``finish`` (send the missing writes), ``undo`` (compensate)
    offers: tuple[str, ...] = ()
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        """The API's view (``GET /v1/plans/{id}/settlement``)."""
        return {
            "plan_id": self.plan_id,
            "status": self.status,
            "writes": {str(k): v for k, v in sorted(self.writes.items())},
            "evidence": {str(k): v for k, v in sorted(self.evidence.items())},
            "offers": list(self.offers),
            "reason": self.reason,
        }


#: a write's ledger state → how the settlement names it
_NAMES = {
    "completed": "done",
    "unknown": "unknown",
    "failed": "failed",
    "in_progress": "in_progress",
}


@dataclass
class Settler:
    """Settles cut-short interactive executes on the executor in force (``executor()``)."""

    executor: Callable[[], Executor]
    #: provider reads by natural key, by ``connector.op`` (``probes.default_probes``)
    probes: Mapping[str, Probe] = field(default_factory=default_probes)
    #: a key sent longer ago than this whose n8n record and provider show nothing is ``failed``
    settle_after_s: float = 30.0
    #: the actor of the audit rows a settlement writes
    actor: str = "reconciler"
    #: how n8n's records are read (production defaults; one machine's tests may set skew 0)
    scan: RecordScan = field(default_factory=RecordScan)

    async def settle(self, plan_id: str, *, decide: bool = True) -> Settlement:
        """Settle the plan's unknown writes from evidence, then let it go on. With a write still
        unknown: ``decide`` ends the execute ``needs_attention``; without it (the evidence may
        still come: n8n restarting, its records not yet past the send) nothing is recorded and
        the next pass tries again."""
        ex = self.executor()
        verified, user_id, expired = self._load(ex, plan_id)
        evidence = await self._from_n8n(ex, verified, user_id)
        evidence.update(await self._from_providers(ex, verified))
        known = self.known(ex, verified, evidence)
        if "in_progress" in known.writes.values():
            return known  # a live holder is writing: not ours to settle
        if "unknown" in known.writes.values() or expired:
            if not decide and not expired:
                return known
            return self._needs_attention(ex, verified, user_id, known, expired)
        return await self._finish(ex, verified, user_id, known)

    async def finish(self, plan_id: str, *, user_id: str) -> Settlement:
        """The person's "finish": settle again, then send the missing writes under the spent
        approval. Refused while a write is still unknown."""
        ex = self.executor()
        _, owner, expired = self._load(ex, plan_id)
        self._own(plan_id, owner, user_id)
        self._only_cut_short(ex, plan_id)
        if expired:
            raise ExecuteRefusedError(f"plan {plan_id}: {expired}; undo what was done instead")
        out = await self.settle(plan_id)
        if "unknown" in out.writes.values():
            raise ExecuteRefusedError(
                f"plan {plan_id}: steps {sorted(k for k, v in out.writes.items() if v == 'unknown')}"
                " are still unknown; finish sends the missing writes only once they are settled"
            )
        return out

    async def undo(self, plan_id: str, *, user_id: str) -> Settlement:
        """The person's "undo": compensate every write done, newest first; the execute ends
        ``failed`` with what was undone (unknown writes are named: they cannot be undone)."""
        ex = self.executor()
        verified, owner, _ = self._load(ex, plan_id)
        self._own(plan_id, owner, user_id)
        self._only_cut_short(ex, plan_id)
        known = self.known(ex, verified, {})
        if "in_progress" in known.writes.values():
            raise ExecuteRefusedError(f"plan {plan_id}: a write is in progress; try again shortly")
        run, progress, _ = self._run(ex, verified, user_id)
        writer = ex._writer()
        done = writer.earlier_writes(run, progress)
        undone = await writer.undo(run, done)
        ex.recorder.plans.set_status(plan_id, "failed")
        left = sorted(k for k, v in known.writes.items() if v == "unknown")
        ex._audit(
            kind="execute_finished",
            status="failed",
            actor=user_id,
            plan_id=plan_id,
            reason="undone by the person after an execute was cut short",
            details={"compensated": sorted(undone), "unknown": left},
        )
        writes = {**known.writes, **dict.fromkeys(undone, "compensated")}
        return Settlement(plan_id, "undone", writes, known.evidence, (), _undo_reason(undone, left))

    def describe(self, plan_id: str, *, user_id: str) -> Settlement:
        """What is known now of the plan's interactive writes and what the person may do (no
        evidence is read: ``settle`` does that)."""
        ex = self.executor()
        verified, owner, expired = self._load(ex, plan_id)
        self._own(plan_id, owner, user_id)
        known = self.known(ex, verified, {})
        values = set(known.writes.values())
        attention = self._ended_already(ex, plan_id, "needs_attention")
        status = "needs_attention" if attention else "unknown" if "unknown" in values else ""
        status = status or ("in_progress" if "in_progress" in values else "settled")
        offers = _offers(known, expired) if status in ("needs_attention", "unknown") else ()
        return Settlement(plan_id, status, known.writes, {}, offers, expired)

    async def undo_again(self, plan_id: str) -> list[int]:
        """An execute that ended ``failed`` with a compensation that failed (its runtime was down
        when it undid): undo what is still done, newest first; audited ``undo_settled`` once
        nothing is left (the next pass tries again otherwise). The steps undone now."""
        ex = self.executor()
        verified, user_id, _ = self._load(ex, plan_id)
        run, progress, _ = self._run(ex, verified, user_id)
        writer = ex._writer()
        done = writer.earlier_writes(run, progress)
        undone = await writer.undo(run, done) if done else []
        whole = len(undone) == len(done)
        # the undo's writes are the execute's again: its end is recorded after them
        ex._audit(
            kind="execute_finished",
            status="failed",
            actor=self.actor,
            plan_id=plan_id,
            reason="undone again after the execute's own undo failed",
            details={"compensated": sorted(undone), "left": len(done) - len(undone)},
        )
        if whole:
            ex._audit(
                kind="undo_settled",
                status="ok",
                actor=self.actor,
                plan_id=plan_id,
                details={"compensated": sorted(undone)},
            )
        return undone

    # ---- what is known --------------------------------------------------------------------------
    def known(
        self, ex: Executor, verified: VerifiedPlan, evidence: Mapping[int, str]
    ) -> Settlement:
        """Each interactive write's state from the ledger (and the plan's stored progress)."""
        plan = verified.plan
        run, progress, _ = self._run(ex, verified, plan.intent.user_id)
        writes: dict[int, str] = {}
        for w in write_specs(plan, ex.registry):
            writes[w.step] = self._write_state(ex, plan, plan.step(w.step), run, progress)
        return Settlement(plan.plan_id, "in_progress", writes, dict(evidence))

    def _write_state(
        self, ex: Executor, plan: Plan, step: PlanStep, run: Run, progress: Progress
    ) -> str:
        status = progress.get(step.step, ("pending", None))[0]
        if status in ("compensated", "done"):
            return status
        try:
            args = resolved_args(step, run.outputs, run.choices)
        except CountersignError:
            return "pending"  # reads an earlier write's output: not sent before that write
        row = ex.ledger.state(idempotency_key(plan.plan_id, step.step, args))
        if row is None:
            return "pending"
        state = str(row["state"])
        if state == "in_progress" and row["lease_until"] <= ex.clock():
            # its holder is gone: before the send nothing left; after it, the outcome is unknown
            return "unknown" if row.get("sent_at") is not None else "pending"
        return _NAMES.get(state, state)

    # ---- evidence -------------------------------------------------------------------------------
    async def _from_n8n(self, ex: Executor, verified: VerifiedPlan, user_id: str) -> dict[int, str]:
        """Settle unknown keys from n8n's execution records (``execute.reconcile``, also for a
        plan past its TTL); why each stayed what it is."""
        ex.ledger.recover_expired()
        if not ex.ledger.unknown_keys(verified.plan.plan_id):
            return {}
        if not isinstance(ex.transport, N8nTransport):
            return {}
        reconciler = Reconciler(
            ex.registry, ex.ledger, ex.recorder.plans, ex._audit, ex.credentials, ex.clock
        )
        scan = replace(self.scan, settle=timedelta(seconds=self.settle_after_s))
        try:
            found = await reconciler.reconcile(
                ex.transport.client, verified, user_id=user_id, scan=scan
            )
        except (CountersignError, OSError) as e:  # n8n is down: the provider may still say
            return {0: f"n8n's records could not be read: {str(e)[:200]}"}
        return {n: f"n8n's execution record: {v}" for n, v in found.items()}

    async def _from_providers(self, ex: Executor, verified: VerifiedPlan) -> dict[int, str]:
        """Settle what n8n could not from the provider, read by the write's natural key."""
        plan = verified.plan
        out: dict[int, str] = {}
        rows = ex.ledger.unknown_keys(plan.plan_id)
        if not rows:
            return out
        run, _, _ = self._run(ex, verified, plan.intent.user_id)
        now = ex.clock()
        for row in rows:
            step = reconcilable(plan, str(row["key"]))
            probe = self.probes.get(f"{step.uses}.{step.call}") if step is not None else None
            if step is None or probe is None:
                continue
            args = resolved_args(step, run.outputs, run.choices)
            verdict, output = await probe(step, args, ex.settings, str(row["key"]))
            sent = row.get("sent_at") or row["created_at"]
            if verdict == "failed" and now - sent < timedelta(seconds=self.settle_after_s):
                out[step.step] = "the provider does not have it yet; too soon to call it failed"
                continue
            out[step.step] = f"the provider, read by its key: {verdict}"
            self._settle_key(ex, plan, step, str(row["key"]), verdict, output)
        return out

    def _settle_key(
        self, ex: Executor, plan: Plan, step: PlanStep, key: str, verdict: str, output: Any
    ) -> None:
        if verdict == "completed":
            result = {"output": output, "status": None, "deduplicated": False, "id": None}
            ex.ledger.reconcile(key, outcome="completed", result=result, actor="provider")
            ex.recorder.plans.set_step(plan.plan_id, step.step, "done", output=output)
        elif verdict == "failed":
            ex.ledger.reconcile(key, outcome="failed", actor="provider")

    # ---- going on -------------------------------------------------------------------------------
    async def _finish(
        self, ex: Executor, verified: VerifiedPlan, user_id: str, known: Settlement
    ) -> Settlement:
        """Every write settled: run the missing ones under the approvals spent for this run
        (gates passed and not fully written), wait at the next undecided gate, or end."""
        plan = verified.plan
        run, progress, prints = self._run(ex, verified, user_id)
        specs = write_specs(plan, ex.registry)
        gates = gate_order(plan, specs)
        spent = {
            g: run.choices[g]
            for g in gates
            if g in run.choices
            and not all(progress.get(w.step, ("",))[0] == "done" for w in specs if w.gate_id == g)
        }
        report = await self._through(ex, run, specs, gates, spent, progress, prints)
        ex._audit(
            kind="execute_finished",
            status=report.status,
            actor=self.actor,
            plan_id=plan.plan_id,
            op=report.waiting_gate,
            reason="settled after the execute was cut short",
            details={"compensated": report.compensated, "for": user_id},
        )
        if ex.plan_writer is not None and report.status in ("completed", "failed"):
            ex.plan_writer.record(plan.plan_id, audit=ex._audit)
        after = self.known(ex, verified, known.evidence)
        return Settlement(plan.plan_id, report.status, after.writes, known.evidence)

    async def _through(
        self,
        ex: Executor,
        run: Run,
        specs: list[WriteSpec],
        gates: list[str],
        spent: dict[str, Any],
        progress: Progress,
        prints: Mapping[int, str],
    ) -> ExecuteReport:
        if spent:
            return await ex._through_gates(run, specs, gates, spent, progress, prints)
        # every approved gate's writes are done: the execute only did not record its end
        for g in gates:
            g_specs = [w for w in specs if w.gate_id == g]
            if not all(progress.get(w.step, ("",))[0] == "done" for w in g_specs):
                return await ex._views().wait_at(run, g, g_specs, prints)
        ex.recorder.plans.set_status(run.plan.plan_id, "completed")
        return run.report("completed")

    def _needs_attention(
        self,
        ex: Executor,
        verified: VerifiedPlan,
        user_id: str,
        known: Settlement,
        expired: str,
    ) -> Settlement:
        """Nothing more can be known now: end the execute ``unknown``, say what is known and
        offer finish (once nothing is unknown and the plan can still run) or undo."""
        plan = verified.plan
        unknown = sorted(k for k, v in known.writes.items() if v == "unknown")
        offers = _offers(known, expired)
        reason = expired or f"the outcome of steps {unknown} cannot be known from the evidence"
        out = Settlement(
            plan.plan_id, "needs_attention", known.writes, known.evidence, offers, reason
        )
        if self._ended_already(ex, plan.plan_id, "needs_attention"):
            return out
        ex._audit(
            kind="execute_finished",
            status="unknown",
            actor=self.actor,
            plan_id=plan.plan_id,
            reason=reason[:500],
            details={"needs_attention": True, **out.to_json(), "for": user_id},
        )
        return out

    def _end(
        self, ex: Executor, plan: Plan, user_id: str, known: Settlement, status: str, why: str
    ) -> Settlement:
        ex.recorder.plans.set_status(plan.plan_id, status)
        ex._audit(
            kind="execute_finished",
            status=status,
            actor=self.actor,
            plan_id=plan.plan_id,
            reason=why,
            details={"for": user_id},
        )
        return Settlement(plan.plan_id, status, known.writes, known.evidence, (), why)

    @staticmethod
    def _ended_already(ex: Executor, plan_id: str, marker: str) -> bool:
        """Did an earlier pass end this execute with ``marker`` (and nothing ran since)?"""
        for e in reversed(PlanEvents(ex.db).since(plan_id, limit=2_000)):
            if e["kind"] == "step_started":
                return False
            details = e.get("details")
            if e["kind"] == "execute_finished":
                return isinstance(details, Mapping) and bool(details.get(marker))
        return False

    @staticmethod
    def cut_short(ex: Executor, plan_id: str) -> bool:
        """Was the plan's last execute cut short: a write started after the last recorded end,
        or that end was ``needs_attention``? (Finish and undo are for those only.)"""
        for e in reversed(PlanEvents(ex.db).since(plan_id, limit=2_000)):
            if e["kind"] in ("step_started", "step_unknown", "idempotency_unknown"):
                return True
            details = e.get("details")
            if e["kind"] == "execute_finished":
                return isinstance(details, Mapping) and bool(details.get("needs_attention"))
        return False

    def _only_cut_short(self, ex: Executor, plan_id: str) -> None:
        if not self.cut_short(ex, plan_id):
            raise ExecuteRefusedError(
                f"plan {plan_id}: its last execute was not cut short; nothing to finish or undo"
            )

    # ---- the plan as stored ---------------------------------------------------------------------
    def _load(self, ex: Executor, plan_id: str) -> tuple[VerifiedPlan, str, str]:
        """The verified plan (its signature checked), its owner, and why it can no longer run
        ('' while it can: within its TTL, on the registry it was signed against)."""
        doc = ex.recorder.plans.signed_document(plan_id)
        if doc is None:
            raise ExecuteRefusedError(f"no plan {plan_id}")
        verified = verify_signed_plan(doc, keys=ex.keys)
        try:
            check_current(verified.plan, registry_version=ex.registry.version, now=ex.clock())
        except PlanNotCurrentError as e:  # what was done can still be undone
            return verified, verified.plan.intent.user_id, e.message[:300]
        return verified, verified.plan.intent.user_id, ""

    @staticmethod
    def _own(plan_id: str, owner: str, user_id: str) -> None:
        if owner != user_id:
            raise ExecuteRefusedError(f"no plan {plan_id}")

    @staticmethod
    def _run(
        ex: Executor, verified: VerifiedPlan, user_id: str
    ) -> tuple[Run, Progress, dict[int, str]]:
        """This plan's run state as stored: outputs seen and written, gates passed."""
        plan = verified.plan
        specs = write_specs(plan, ex.registry)
        row = ex.recorder.plans.get(plan.plan_id)
        progress = progress_of(row)
        preview_out, prints = ex.recorder.plans.preview_in(row)
        run = ex._run_of(verified, specs, gate_order(plan, specs), preview_out, progress, user_id)
        for g in gate_order(plan, specs):
            status = progress.get(gate_step(plan, g), ("pending", None))[0]
            if status != "done":
                run.choices.pop(g, None)
        return run, progress, dict(prints)


def _offers(known: Settlement, expired: str) -> tuple[str, ...]:
    """Finish only once nothing is unknown and the plan may still run; undo once something
    was done, or while a write stays unknown (nothing else could end the plan then: the undo
    compensates what was done, if anything, and ends it ``failed`` naming the unknown writes
    for the person to check with the provider)."""
    values = set(known.writes.values())
    offers = () if expired or "unknown" in values else ("finish",)
    return offers + (("undo",) if values & {"done", "unknown"} else ())


def _undo_reason(undone: list[int], unknown: list[int]) -> str:
    text = f"undone: steps {sorted(undone)}" if undone else "nothing was done to undo"
    if unknown:
        text += f"; steps {unknown} stay unknown (check them with the provider)"
    return text
