"""One gate's writes and their undo (ExecuteOrchestrator SPEC 3c, 5 and 6): each write through the
one write sequence (``steps.write_once``) on n8n, as the DAG allows; on a failed write every write
of the plan done so far is undone, newest first (``steps.undo_writes``), and what moved under it is
reported; a gate decided again first undoes what its earlier choice wrote. A failed write is
classified and sent again where the policy's failure table retries it (``recovery``); what
follows a failure that ends the gate is on the event stream (``step_failure``) and the report."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from countersign.binding import resolve_refs
from countersign.kernel import (
    BindingError,
    ExecuteResult,
    ExecuteWrapper,
    Plan,
    PlanStep,
    content_hash,
)
from countersign.registry import Registry
from countersign.steps import (
    Replay,
    StepFailedError,
    StepMarks,
    Write,
    WriteFailedError,
    WriteProtocol,
    idempotency_key,
    natural_key,
    run_dag,
    undo_writes,
    write_once,
)
from countersign.steps.failures import Failure, classify_error
from countersign.storage import PlanStore

from .checks import Audit
from .core import WriteSpec
from .recovery import Recovery, action_after
from .state import Done, ExecuteReport, Progress, Run, gate_step, output_of
from .views import Views

__all__ = ["GateWriter"]


def resolved_args(
    step: PlanStep, outputs: Mapping[int, Any], choices: Mapping[str, Any]
) -> dict[str, Any]:
    """The step's args with their references resolved (what its idempotency key hashes)."""
    resolved: dict[str, Any] = resolve_refs(step.args, outputs, choices)
    return resolved


@dataclass(frozen=True)
class GateWriter:
    """Writes and undoes the writes of one execute, against ``registry``."""

    registry: Registry
    writes: WriteProtocol
    plans: PlanStore
    audit: Audit
    #: sends a failed write again where the failure table says so; None: each write once
    recovery: Recovery | None = None
    #: the write protocol's claim marks the step ``running`` in its own transaction (the
    #: Executor's ``audit_in``), so the write sequence's ``running`` mark writes nothing more
    running_in_claim: bool = False

    def marks(self, plan: Plan) -> StepMarks:
        """Where the write sequence records the plan's step statuses (the PlanStore)."""

        def mark(step: int, status: str, output: Any) -> None:
            if status == "running" and self.running_in_claim:
                return
            self.plans.set_step(plan.plan_id, step, status, output=output)

        return mark

    def started(
        self,
        plan: Plan,
        steps: list[PlanStep],
        outputs: Mapping[int, Any],
        choices: Mapping[str, Any],
        *,
        conn: Connection | None = None,
    ) -> bool:
        """Has an earlier execute already claimed any of these writes? (Then skip the staleness
        check: our own writes changed the world.) One ledger statement for them all; ``conn``:
        asked on that connection (the gate's resource lock's) instead of one from the pool."""
        keys = []
        for step in steps:
            try:
                args = resolved_args(step, outputs, choices)
            except BindingError:
                continue  # it reads an earlier write's output: not claimable before that write
            keys.append(idempotency_key(plan.plan_id, step.step, args))
        return bool(self.writes.ledger.claimed(keys, conn=conn))

    async def run(
        self, run: Run, g_specs: list[WriteSpec], progress: Progress, prints: Mapping[int, str]
    ) -> ExecuteReport | None:
        """Run one gate's writes, each through the write sequence (the plan is ``executing``:
        the gate passed, ``PlanStore.pass_gate``). On a failed write: ``failed``; None when all
        completed."""
        plan = run.plan
        mark = self.marks(plan)

        async def one(step: PlanStep, known: Mapping[int, Any]) -> Any:
            args = resolved_args(step, known, run.choices)
            write = Write.of(plan.plan_id, step, args, self.registry, known)
            if self.recovery is None:
                outcome = await write_once(
                    self.writes, run.runner, write, actor=run.user_id, mark=mark
                )
            else:
                outcome = await self.recovery.write(
                    self.writes, run.runner, write, actor=run.user_id, mark=mark
                )
            replay = isinstance(outcome, Replay) or outcome.verdict == "deduplicated"
            run.done.append((step, args, outcome.result))
            run.wrappers[step.step] = self._wrapper(step, args, outcome.result, replay=replay)
            return output_of(outcome.result)

        try:
            run.outputs.update(
                await run_dag(plan, [w.step for w in g_specs], one, outputs=run.outputs)
            )
        except (StepFailedError, WriteFailedError) as e:
            return await self.failed(run, g_specs, progress, prints, e)
        return None

    async def failed(
        self,
        run: Run,
        g_specs: list[WriteSpec],
        progress: Progress,
        prints: Mapping[int, str],
        e: StepFailedError | WriteFailedError,
    ) -> ExecuteReport:
        """After a failed write: undo every write of the plan done so far (newest first), look
        again at what the writes depended on, and report the failure."""
        plan = run.plan
        compensated = await self.undo(run, self.earlier_writes(run, progress) + run.done)
        changes = await Views.changes_after_failure(run, g_specs, prints)
        if changes:
            self.audit(
                kind="step_failed_world_changed",
                status="stale",
                actor=run.user_id,
                plan_id=plan.plan_id,
                step=e.step,
                details={"changes": [c.summary() for c in changes]},
            )
        self.plans.set_status(plan.plan_id, "failed")
        run.wrappers[e.step] = ExecuteWrapper(
            provider=plan.step(e.step).uses, status="error", step=e.step, error=e.reason[:300]
        )
        failure = self.failure_seen(run, e, compensated=compensated)
        return run.report("failed", compensated=compensated, stale=changes, failure=failure)

    def failure_seen(
        self, run: Run, e: Exception, *, compensated: list[int] | None = None
    ) -> dict[str, Any] | None:
        """Classify what stopped a step, audit it (``step_failure``: its class and what follows,
        in plain words) and return it for the report; None when it is not a step failure or no
        failure table is in force."""
        failure = classify_error(e)
        if failure is None or self.recovery is None:
            return None
        action = action_after(self.recovery.table, failure)
        sends = e.sends if isinstance(e, WriteFailedError) else 1
        step = failure.step
        out = failure_json(failure, action, sends)
        if compensated:
            out["compensated"] = sorted(compensated)
        s = run.plan.step(step) if step is not None and 1 <= step <= len(run.plan.graph) else None
        self.audit(
            kind="step_failure",
            status=action,
            actor=run.user_id,
            plan_id=run.plan.plan_id,
            step=step,
            op=None if s is None else f"{s.uses}.{s.call}",
            reason=failure.reason[:500],
            retries=max(sends - 1, 0),
            details=out,
        )
        return {**out, "step": step}

    async def undo(self, run: Run, done: list[Done]) -> list[int]:
        """Undo ``done`` through the write sequence (``steps.undo_writes``); the steps undone,
        each marked ``compensated``."""
        return await undo_writes(
            self.writes,
            run.runner,
            run.plan,
            self.registry,
            done,
            actor=run.user_id,
            mark=self.marks(run.plan),
        )

    async def undo_if_redecided(
        self, run: Run, gate: str, g_specs: list[WriteSpec], progress: Progress
    ) -> ExecuteReport | None:
        """A gate decided again with another choice after its writes ran (the person picked
        another item once the price moved): what those writes did is undone first — newest
        first, each compensation through the ledger — so only the new choice is written and a
        later gate reviews one cart, not two. Returns a failed report if something could not be
        undone (nothing new is written then); None otherwise."""
        plan = run.plan
        status, out = progress.get(gate_step(plan, gate), ("pending", None))
        before = out.get("choice") if status == "done" and isinstance(out, Mapping) else None
        if status != "done" or content_hash(before) == content_hash(run.choices[gate]):
            return None
        done = self.earlier_writes(
            run, progress, only={w.step for w in g_specs}, choices={**run.choices, gate: before}
        )
        undone = await self.undo(run, done)
        for n in undone:
            progress[n] = ("compensated", None)
            run.outputs.pop(n, None)
        self.audit(
            kind="gate_redecided",
            status="ok" if len(undone) == len(done) else "failed",
            actor=run.user_id,
            plan_id=plan.plan_id,
            op=gate,
            details={"undone": sorted(undone), "writes": sorted(s.step for s, _, _ in done)},
        )
        if len(undone) == len(done):
            return None
        self.plans.set_status(plan.plan_id, "failed")
        return ExecuteReport(plan.plan_id, "failed", compensated=sorted(undone))

    def earlier_writes(
        self,
        run: Run,
        progress: Progress,
        *,
        only: set[int] | None = None,
        choices: Mapping[str, Any] | None = None,
    ) -> list[Done]:
        """Writes an earlier execute completed (an earlier gate), for compensation: all of them,
        or ``only`` these steps; their args resolved with ``choices`` (default: this run's — a
        gate decided again passes the choice those writes were made with)."""
        mine = {s.step for s, _, _ in run.done}
        out: list[Done] = []
        for n in sorted(progress):
            st, value = progress[n]
            step = run.plan.step(n)
            if st != "done" or n in mine or step.gate_id is not None or step.dry_run:
                continue
            if (only is not None and n not in only) or self.registry.op(
                step.uses, step.call
            ).safety != "write":
                continue
            args = resolved_args(step, run.outputs, run.choices if choices is None else choices)
            ident = value.get("id") if isinstance(value, Mapping) else None
            out.append((step, args, {"output": value, "id": ident}))
        return out

    def _wrapper(
        self, step: PlanStep, args: Mapping[str, Any], result: Any, *, replay: bool
    ) -> ExecuteWrapper:
        """How the report shows a write: the provider's id for it (the natural key's field,
        or the answer's ``id`` / ``messageId`` / ``ts``), ``skipped`` when nothing was sent."""
        op = self.registry.op(step.uses, step.call)
        ext: str | None = None
        if natural_key(op) and op.idempotency is not None and op.idempotency.field:
            ext = str(args.get(op.idempotency.field))
        else:
            out = output_of(result) if isinstance(result, Mapping) else None
            if isinstance(out, Mapping):
                found = [out[k] for k in ("id", "messageId", "ts") if out.get(k) is not None]
                ext = str(found[0]) if found else None
        return ExecuteWrapper(
            provider=step.uses,
            result=ExecuteResult(id=ext),
            step=step.step,
            status="skipped" if replay else "created",
        )


def failure_json(failure: Failure, action: str, sends: int) -> dict[str, Any]:
    """A failure as the event stream and the report carry it."""
    return {**failure.to_json(), "action": action, "sends": sends}
