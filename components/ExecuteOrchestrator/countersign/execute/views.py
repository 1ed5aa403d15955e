"""What an execute reads again (ExecuteOrchestrator SPEC 3, 4 and 6): the staleness re-check
before a gate's writes, the fresh view of a gate it stops at, and what moved under a write that
failed. Reads run directly (``N8nStepRunner.read_fresh``) or on n8n (``run``), never writes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from countersign.kernel import CountersignError, Plan
from countersign.steps import N8nStepRunner, fingerprint, run_dag
from countersign.storage import PlanStore

from .checks import Audit
from .core import Change, StaleWorldError, WriteSpec, ancestors, stale_changes
from .revalidate import unchanged_reads
from .state import ExecuteReport, Run, ancestors_of, gate_reads

__all__ = ["Views"]


@dataclass(frozen=True)
class Views:
    """The reads of one execute, their stored fingerprints and their audit rows."""

    plans: PlanStore
    audit: Audit

    async def check_stale(
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
        # the same requests and the same normalization as the preview's; a read after a write
        # (the cart the shop holds) waits for that write's output
        done = {n: v for n, v in before.items() if n not in reads}
        # a read that asked for a window first asks, with one etag-only query, whether anything
        # in it changed; only the ones that did (or cannot tell) are read again (``revalidate``)
        same = await unchanged_reads(runner, plan, reads, before, done)
        rest = [n for n in reads if n not in same]
        fresh = {
            **same,
            **(await runner.read_fresh(rest, outputs={**done, **same}) if rest else {}),
        }
        changes = stale_changes(prints, before, fresh)
        if changes:
            self._refuse_stale(plan, reads, fresh, changes, user_id)
        return {n: fresh[n] for n in reads if n in fresh}

    def _refuse_stale(
        self,
        plan: Plan,
        reads: list[int],
        fresh: Mapping[int, Any],
        changes: list[Change],
        user_id: str,
    ) -> NoReturn:
        # a read after a gate (the cart the shop holds) is not run again by a preview: what it
        # says now is shown in the refusal and becomes what the next approval is held to
        later = {
            n: fresh[n]
            for n in reads
            if n in fresh and any(plan.step(a).gate_id for a in ancestors(plan, n))
        }
        if later:
            self.plans.save_preview(
                plan.plan_id, later, {n: fingerprint(o) for n, o in later.items()}
            )
        self.plans.set_status(plan.plan_id, "stale")
        self.audit(
            kind="execute_refused",
            status="stale",
            actor=user_id,
            plan_id=plan.plan_id,
            reason="world changed since the preview",
            details={"changes": [c.summary() for c in changes]},
        )
        raise StaleWorldError(plan.plan_id, changes)

    async def wait_at(
        self, run: Run, gate: str, g_specs: list[WriteSpec], prints: Mapping[int, str]
    ) -> ExecuteReport:
        """Stop before ``gate``: read afresh what it guards (the reads its writes depend on), show
        it with the results of the writes already done, and keep those fingerprints as what the
        person approves next (the staleness check of the next execute compares against them)."""
        plan = run.plan
        reads = gate_reads(g_specs)
        fresh = await run_dag(plan, reads, run.runner.run, outputs=run.outputs) if reads else {}
        fresh = {n: fresh[n] for n in reads}
        if fresh:
            before, _ = self.plans.preview_of(plan.plan_id)
            self.plans.save_preview(
                plan.plan_id,
                {**before, **fresh},
                {**prints, **{n: fingerprint(o) for n, o in fresh.items()}},
            )
        guarded = {w.step for w in g_specs}
        done = {
            n: run.outputs[n]
            for n in sorted(run.outputs)
            if n not in fresh and n in ancestors_of(plan, guarded) and n not in prints
        }
        self.plans.set_status(plan.plan_id, "waiting")
        self.audit(
            kind="gate_waiting",
            status="waiting",
            actor=run.user_id,
            plan_id=plan.plan_id,
            op=gate,
            details={"reads": reads, "writes_done": sorted(done)},
        )
        return run.report(
            "waiting",
            waiting_gate=gate,
            gate_preview={
                "gate": gate,
                "guards": sorted(guarded),
                "reads": {str(n): o for n, o in fresh.items()},
                "done": {str(n): o for n, o in done.items()},
            },
        )

    @staticmethod
    async def changes_after_failure(
        run: Run, g_specs: list[WriteSpec], prints: Mapping[int, str]
    ) -> list[Change]:
        """After a failed write: did the world move under it? (reported, never raised)"""
        reads = gate_reads(g_specs)
        if not reads:
            return []
        try:
            fresh = await run.runner.read_fresh(reads, outputs=run.outputs)
        except CountersignError:
            return []
        return stale_changes(prints, run.outputs, {n: fresh[n] for n in reads})
