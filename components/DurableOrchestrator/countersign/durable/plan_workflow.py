"""PlanExecutionWorkflow: a deterministic interpreter of a signed plan's durable steps.

Steps run in waves: every step whose ``after`` steps are done starts, and independent steps of a
wave run concurrently (``asyncio.gather`` of activities). Reads are ``poll`` activities; writes are
``write_step`` activities behind the idempotency ledger; a gate waits for the ``approve_gate`` /
``reject_gate`` update (token redeemed by an activity). When a write fails after other writes
succeeded, the registry's compensations run newest first (``compensate`` activity) — a saga.
A write whose outcome is unknown waits in ``outcome_unknown`` for a person's ``resolve_step``
update (never a blind retry). No ``assert`` in workflow code. The gate decisions, the unknown-outcome
wait and the run's end are the watcher's too (``workflow_steps.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from countersign.kernel import PlanStep
    from countersign.steps import run_dag

    from .activities import DurableActivities
    from .models import (
        ApproveGate,
        CompensateCall,
        DoneWrite,
        PlanInput,
        PlanRunResult,
        RejectGate,
        ResolveStep,
        StepCall,
    )
    from .patches import ONE_SCHEDULER_PATCH
    from .summary import plan_now, plan_step_summary
    from .workflow_steps import (
        Resolutions,
        cancel_recorded,
        error_type,
        finish,
        record_cancel,
        record_rejection,
        redeem,
        refuse_token,
        verify,
    )

__all__ = ["PlanExecutionWorkflow"]


class _GateClosedError(Exception):
    def __init__(self, status: str) -> None:
        super().__init__(status)
        self.status = status


@workflow.defn(name="PlanExecutionWorkflow")  # the workflow type: never renamed (runs in flight)
class PlanExecutionWorkflow:
    """Runs one signed plan's durable DAG."""

    def __init__(self) -> None:
        self._inp: PlanInput | None = None
        self._status: dict[int, str] = {}
        self._decisions: dict[str, str] = {}
        self._choices: dict[str, Any] = {}
        self._stored = False
        self._resolutions = Resolutions()
        self._failure: str | None = None  # the failed step's error type

    def _timeout(self) -> timedelta:
        return timedelta(seconds=self._inp.activity_timeout_s if self._inp else 60)

    def _show(self, *, ended: str | None = None) -> None:
        """Keep the Temporal UI's current details on the run's progress (metadata: no command)."""
        if self._inp is not None and self._status:
            workflow.set_current_details(plan_now(self._inp.signed, self._status, ended=ended))

    @workflow.query
    def status(self) -> dict[str, str]:
        """Status per step (pending, running, waiting_approval, outcome_unknown, done, failed,
        compensated, rejected, approval_timeout)."""
        return {str(k): v for k, v in sorted(self._status.items())}

    @workflow.update
    async def approve_gate(self, approval: ApproveGate) -> str:
        """Confirm the person's approval of a waiting gate (the token was spent where it
        arrived); the writes after it may run."""
        choice = await redeem(self._inp, approval, self._timeout())
        self._choices[approval.gate_id] = choice
        self._decisions[approval.gate_id] = "approved"
        return "approved"

    @approve_gate.validator
    def _check_approve(self, approval: ApproveGate) -> None:
        refuse_token(approval)
        self._check_gate(approval.gate_id)

    @workflow.update
    async def reject_gate(self, rejection: RejectGate) -> str:
        """Record the rejection; nothing after the gate runs."""
        await record_rejection(self._inp, rejection, self._timeout())
        self._decisions[rejection.gate_id] = "rejected"
        return "rejected"

    @reject_gate.validator
    def _check_reject(self, rejection: RejectGate) -> None:
        self._check_gate(rejection.gate_id)

    def _check_gate(self, gate_id: str) -> None:
        if self._inp is None:
            raise ValueError("the plan has not started")
        steps = [s.step for s in self._inp.signed.plan.graph if s.gate_id == gate_id]
        if not steps:
            raise ValueError(f"the plan has no {gate_id}")
        if self._status.get(steps[0]) != "waiting_approval":
            raise ValueError(f"{gate_id} is not waiting for a decision")
        if gate_id in self._decisions:
            raise ValueError(f"{gate_id} was already decided")

    @workflow.update
    async def resolve_step(self, resolution: ResolveStep) -> str:
        """A person settles a write whose outcome is unknown (ledger reconciled by an activity);
        the step then runs again: answered from the ledger, or sent again under the same key."""
        return await self._resolutions.resolve(resolution, self._timeout())

    @resolve_step.validator
    def _check_resolve(self, resolution: ResolveStep) -> None:
        if self._status.get(resolution.step) != "outcome_unknown":
            raise ValueError(f"step {resolution.step} is not waiting for a resolution")
        self._resolutions.check(resolution)

    @workflow.run
    async def run(self, inp: PlanInput) -> PlanRunResult:
        result = await cancel_recorded(self._run(inp), lambda: self._cancelled_end(inp))
        self._show(ended=result.status)
        await finish(inp.signed, inp.user_id, result.status, self._timeout())
        return result

    async def _cancelled_end(self, inp: PlanInput) -> None:
        """A run cancelled through Temporal: show it, record the outcome."""
        self._show(ended="cancelled")
        await record_cancel(inp.signed, inp.user_id, self._timeout(), self._stored)

    async def _run(self, inp: PlanInput) -> PlanRunResult:
        self._inp = inp
        await verify(inp.signed, self._timeout())
        self._stored = True
        graph = {s.step: s for s in inp.signed.plan.graph}
        self._status = dict.fromkeys(graph, "pending")
        self._show()
        outputs: dict[str, Any] = {}
        done_writes: list[DoneWrite] = []
        if workflow.patched(ONE_SCHEDULER_PATCH):
            closed, failed = await self._schedule(inp, graph, outputs, done_writes)
        else:  # histories recorded before the shared scheduler: whole waves, as they ran then
            closed, failed = await self._waves(inp, graph, outputs, done_writes)
        if closed is not None:
            return PlanRunResult.model_validate({"status": closed, "steps": self.status()})
        if failed is not None:
            compensated = await self._compensate(inp, failed, done_writes, outputs)
            return PlanRunResult(
                status="failed",
                steps=self.status(),
                compensated=compensated,
                failed_step=failed,
                failure=self._failure,
            )
        return PlanRunResult(status="completed", steps=self.status())

    async def _compensate(
        self, inp: PlanInput, failed: int, done_writes: list[DoneWrite], outputs: dict[str, Any]
    ) -> list[int]:
        """The saga: undo the writes that happened, newest first (one activity, each through the
        ledger); the steps compensated."""
        if not done_writes:
            return []
        compensated: list[int] = await workflow.execute_activity_method(
            DurableActivities.compensate,
            CompensateCall(
                signed=inp.signed,
                user_id=inp.user_id,
                done=done_writes,
                outputs=outputs,
                choices=self._choices,
            ),
            retry_policy=RetryPolicy(maximum_attempts=5),
            start_to_close_timeout=self._timeout(),
            summary="compensate steps "
            + ", ".join(str(d.step) for d in reversed(done_writes))
            + f" (step {failed} failed)",
        )
        for c in compensated:
            self._status[c] = "compensated"
        return compensated

    def _finished(
        self,
        n: int,
        s: PlanStep,
        r: Any,
        outputs: dict[str, Any],
        done_writes: list[DoneWrite],
    ) -> None:
        self._status[n] = "done"
        self._show()
        if not s.dry_run and not s.gate_id:
            done_writes.append(DoneWrite(step=n, result=dict(r.get("result") or {})))
            outputs[str(n)] = r.get("result")
        elif not s.gate_id:
            outputs[str(n)] = r

    async def _schedule(
        self,
        inp: PlanInput,
        graph: dict[int, PlanStep],
        outputs: dict[str, Any],
        done_writes: list[DoneWrite],
    ) -> tuple[str | None, int | None]:
        """The one scheduler (``countersign.steps.run_dag``): each step starts as soon as its own
        dependencies are done; the first failure or closed gate stops new starts. When several
        steps fail (or a gate closes) in one wake-up, ``run_dag`` raises the lowest step's, and the
        failed step reported is the one whose exception was raised — never an order that a replay
        could see differently."""
        failed: dict[int, BaseException] = {}

        async def one(step: PlanStep, _known: Mapping[int, Any]) -> Any:
            n = step.step
            try:
                r = await self._step(inp, graph[n], outputs)
            except _GateClosedError as e:
                self._status[n] = e.status
                self._show()
                raise
            except BaseException as e:
                self._status[n] = "failed"
                self._show()
                failed[n] = e
                raise
            self._finished(n, graph[n], r, outputs, done_writes)
            return r

        try:
            await run_dag(inp.signed.plan, sorted(graph), one)
        except _GateClosedError as e:
            return e.status, None
        except Exception as e:
            self._failure = error_type(e)
            raised = [n for n, x in failed.items() if x is e]
            return None, raised[0] if raised else min(failed, default=min(graph))
        return None, None

    async def _waves(
        self,
        inp: PlanInput,
        graph: dict[int, PlanStep],
        outputs: dict[str, Any],
        done_writes: list[DoneWrite],
    ) -> tuple[str | None, int | None]:
        """Histories recorded before ``one-scheduler-v1``: whole waves, as they ran then."""
        finished: set[int] = set()
        while len(finished) < len(graph):
            wave = [
                n
                for n in sorted(graph)
                if n not in finished
                and self._status[n] == "pending"
                and all(d in finished for d in graph[n].after)
            ]
            results = await asyncio.gather(
                *(self._step(inp, graph[n], outputs) for n in wave), return_exceptions=True
            )
            failed: int | None = None
            closed: str | None = None
            for n, r in zip(wave, results, strict=True):
                if isinstance(r, _GateClosedError):
                    closed = r.status
                    self._status[n] = r.status
                elif isinstance(r, BaseException):
                    failed = n
                    self._status[n] = "failed"
                else:
                    finished.add(n)
                    self._finished(n, graph[n], r, outputs, done_writes)
            if closed is not None or failed is not None:
                return closed, failed
        return None, None

    async def _step(self, inp: PlanInput, s: PlanStep, outputs: dict[str, Any]) -> Any:
        n = s.step
        gate = s.gate_id
        if gate:
            return await self._gate(inp, n, gate)
        self._status[n] = "running"
        self._show()
        call = StepCall(
            signed=inp.signed,
            user_id=inp.user_id,
            step=n,
            outputs=dict(outputs),
            choices=dict(self._choices),
        )
        if s.dry_run:
            return await workflow.execute_activity_method(
                DurableActivities.poll,
                call,
                retry_policy=RetryPolicy(maximum_attempts=5),
                start_to_close_timeout=self._timeout(),
                summary=plan_step_summary(inp.signed, n),
            )

        def unknown(waiting: bool) -> None:  # never a blind retry: a person resolves the step
            self._status[n] = "outcome_unknown" if waiting else "running"
            self._show()

        result = await self._resolutions.write(
            call,
            timeout=self._timeout(),
            summary=plan_step_summary(inp.signed, n),
            unknown=unknown,
        )
        return {"result": result}

    async def _gate(self, inp: PlanInput, n: int, gate: str) -> Any:
        """Wait for the person's decision on the gate; the choice, or the run closes."""
        self._status[n] = "waiting_approval"
        self._show()
        try:
            await workflow.wait_condition(
                lambda: gate in self._decisions,
                timeout=timedelta(seconds=inp.approval_timeout_s),
                timeout_summary=plan_step_summary(inp.signed, n),
            )
        except TimeoutError:
            raise _GateClosedError("approval_timeout") from None
        if self._decisions[gate] != "approved":
            raise _GateClosedError("rejected")
        return self._choices.get(gate)
