"""PlanExecutionWorkflow: a deterministic interpreter of a signed plan's durable steps.

Steps run in waves: every step whose ``after`` steps are done starts, and independent steps of a
wave run concurrently (``asyncio.gather`` of activities). Reads are ``poll`` activities; writes are
``write_step`` activities behind the idempotency ledger; a gate waits for the ``approve_gate`` /
``reject_gate`` update (token redeemed by an activity). When a write fails after other writes
succeeded, the registry's compensations run newest first (``compensate`` activity) — a saga.
A write whose outcome is unknown waits in ``outcome_unknown`` for a person's ``resolve_step``
update (never a blind retry). No ``assert`` in workflow code.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from countersign.kernel import Plan, PlanStep
    from countersign.steps import run_dag

    from .activities import DurableActivities
    from .models import (
        ApproveGate,
        CompensateCall,
        DoneWrite,
        PlanInput,
        PlanRunResult,
        ReconcileCall,
        RedeemCall,
        RejectGate,
        ResolveStep,
        StepCall,
    )
    from .summary import plan_now, plan_step_summary
    from .workflows import (
        CANCEL_PATCH,
        finish,
        not_started,
        outcome_unknown,
        record_cancel,
        shielded,
    )

__all__ = ["PlanExecutionWorkflow"]

_ONCE = RetryPolicy(maximum_attempts=1)
_WRITE = RetryPolicy(
    maximum_attempts=5,
    non_retryable_error_types=["idempotency_outcome_unknown", "provider_refused"],
)


class _GateClosedError(Exception):
    def __init__(self, status: str) -> None:
        super().__init__(status)
        self.status = status


@workflow.defn
class PlanExecutionWorkflow:
    """Runs one signed plan's durable DAG."""

    def __init__(self) -> None:
        self._inp: PlanInput | None = None
        self._status: dict[int, str] = {}
        self._decisions: dict[str, str] = {}
        self._choices: dict[str, Any] = {}
        self._unknown: dict[int, StepCall] = {}
        self._resolving: set[int] = set()
        self._resolved: set[int] = set()

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
        """Redeem the token for a waiting gate; the writes after it may run."""
        if self._inp is None:
            raise not_started("approve_gate")
        choice = await workflow.execute_activity_method(
            DurableActivities.redeem_gate,
            RedeemCall(
                signed=self._inp.signed,
                user_id=self._inp.user_id,
                gate_id=approval.gate_id,
                token=approval.token,
            ),
            retry_policy=_ONCE,
            start_to_close_timeout=self._timeout(),
            summary=f"{approval.gate_id}: redeem the person's approval",
        )
        self._choices[approval.gate_id] = choice
        self._decisions[approval.gate_id] = "approved"
        return "approved"

    @approve_gate.validator
    def _check_approve(self, approval: ApproveGate) -> None:
        self._check_gate(approval.gate_id)

    @workflow.update
    async def reject_gate(self, rejection: RejectGate) -> str:
        """Record the rejection; nothing after the gate runs."""
        if self._inp is None:
            raise not_started("reject_gate")
        await workflow.execute_activity_method(
            DurableActivities.reject_gate,
            RedeemCall(
                signed=self._inp.signed,
                user_id=self._inp.user_id,
                gate_id=rejection.gate_id,
                token=rejection.reason or "rejected",
            ),
            retry_policy=_ONCE,
            start_to_close_timeout=self._timeout(),
            summary=f"{rejection.gate_id}: record the person's rejection",
        )
        self._decisions[rejection.gate_id] = "rejected"
        return "rejected"

    @reject_gate.validator
    def _check_reject(self, rejection: RejectGate) -> None:
        self._check_gate(rejection.gate_id)

    def _check_gate(self, gate_id: str) -> None:
        if self._inp is None:
            raise ValueError("the plan has not started")
        steps = [
            s["step"] for s in self._inp.signed["plan"]["graph"] if s.get("gate_id") == gate_id
        ]
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
        call = self._unknown.get(resolution.step)
        if call is None:
            raise not_started("resolve_step")
        self._resolving.add(resolution.step)
        try:
            await workflow.execute_activity_method(
                DurableActivities.reconcile_step,
                ReconcileCall(call=call, outcome=resolution.outcome, result=resolution.result),
                retry_policy=_ONCE,
                start_to_close_timeout=self._timeout(),
            )
        finally:
            self._resolving.discard(resolution.step)
        self._resolved.add(resolution.step)
        return resolution.outcome

    @resolve_step.validator
    def _check_resolve(self, resolution: ResolveStep) -> None:
        if self._status.get(resolution.step) != "outcome_unknown":
            raise ValueError(f"step {resolution.step} is not waiting for a resolution")
        if resolution.step in self._resolving or resolution.step in self._resolved:
            raise ValueError(f"step {resolution.step} is already being resolved")

    @workflow.run
    async def run(self, inp: PlanInput) -> PlanRunResult:
        try:
            result = await self._run(inp)
        except (asyncio.CancelledError, ActivityError, ApplicationError) as e:
            # Temporal's own cancellation (the UI's "Request Cancellation", the API's cancel) —
            # raised as such, or as the cancelled activity it interrupted: record the outcome,
            # then end CANCELED (histories from before replay unchanged)
            if not is_cancelled_exception(e) or not workflow.patched(CANCEL_PATCH):
                raise
            stored = getattr(self, "_stored", False)
            self._show(ended="cancelled")
            await shielded(record_cancel(inp.signed, inp.user_id, self._timeout(), stored))
            raise asyncio.CancelledError from e
        self._show(ended=result.status)
        await finish(inp.signed, inp.user_id, result.status, self._timeout())
        return result

    async def _run(self, inp: PlanInput) -> PlanRunResult:
        self._inp = inp
        await workflow.execute_activity_method(
            DurableActivities.verify_plan,
            inp.signed,
            retry_policy=_ONCE,
            start_to_close_timeout=self._timeout(),
            summary="verify the signed plan",
        )
        self._stored = True
        graph = {int(s["step"]): s for s in inp.signed["plan"]["graph"]}
        self._status = dict.fromkeys(graph, "pending")
        self._show()
        outputs: dict[str, Any] = {}
        done_writes: list[DoneWrite] = []
        if workflow.patched("one-scheduler-v1"):
            closed, failed = await self._schedule(inp, graph, outputs, done_writes)
        else:  # histories recorded before the shared scheduler: whole waves, as they ran then
            closed, failed = await self._waves(inp, graph, outputs, done_writes)
        if closed is not None:
            return PlanRunResult.model_validate({"status": closed, "steps": self.status()})
        if failed is not None:
            compensated: list[int] = []
            if done_writes:
                compensated = await workflow.execute_activity_method(
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
            return PlanRunResult(
                status="failed",
                steps=self.status(),
                compensated=compensated,
                failed_step=failed,
            )
        return PlanRunResult(status="completed", steps=self.status())

    def _finished(
        self,
        n: int,
        s: dict[str, Any],
        r: Any,
        outputs: dict[str, Any],
        done_writes: list[DoneWrite],
    ) -> None:
        self._status[n] = "done"
        self._show()
        if not s["dry_run"] and not s.get("gate_id"):
            done_writes.append(DoneWrite(step=n, result=dict(r.get("result") or {})))
            outputs[str(n)] = r.get("result")
        elif not s.get("gate_id"):
            outputs[str(n)] = r

    async def _schedule(
        self,
        inp: PlanInput,
        graph: dict[int, dict[str, Any]],
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

        plan = Plan.model_validate(inp.signed["plan"])
        try:
            await run_dag(plan, sorted(graph), one)
        except _GateClosedError as e:
            return e.status, None
        except Exception as e:
            raised = [n for n, x in failed.items() if x is e]
            return None, raised[0] if raised else min(failed, default=min(graph))
        return None, None

    async def _waves(
        self,
        inp: PlanInput,
        graph: dict[int, dict[str, Any]],
        outputs: dict[str, Any],
        done_writes: list[DoneWrite],
    ) -> tuple[str | None, int | None]:
        finished: set[int] = set()
        while len(finished) < len(graph):
            wave = [
                n
                for n in sorted(graph)
                if n not in finished
                and self._status[n] == "pending"
                and all(d in finished for d in graph[n]["after"])
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

    async def _step(self, inp: PlanInput, s: dict[str, Any], outputs: dict[str, Any]) -> Any:
        n = int(s["step"])
        gate = s.get("gate_id")
        if gate:
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
        self._status[n] = "running"
        self._show()
        call = StepCall(
            signed=inp.signed,
            user_id=inp.user_id,
            step=n,
            outputs=dict(outputs),
            choices=dict(self._choices),
        )
        if s["dry_run"]:
            return await workflow.execute_activity_method(
                DurableActivities.poll,
                call,
                retry_policy=RetryPolicy(maximum_attempts=5),
                start_to_close_timeout=self._timeout(),
                summary=plan_step_summary(inp.signed, n),
            )
        while True:
            try:
                result = await workflow.execute_activity_method(
                    DurableActivities.write_step,
                    call,
                    retry_policy=_WRITE,
                    start_to_close_timeout=self._timeout(),
                    summary=plan_step_summary(inp.signed, n),
                )
                return {"result": result}
            except ActivityError as e:
                if not outcome_unknown(e):
                    raise
            # never a blind retry: a person looks at the provider and resolves the step
            self._status[n] = "outcome_unknown"
            self._show()
            self._unknown[n] = call
            self._resolved.discard(n)
            await workflow.wait_condition(lambda: n in self._resolved)
            self._unknown.pop(n, None)
            self._status[n] = "running"
            self._show()
