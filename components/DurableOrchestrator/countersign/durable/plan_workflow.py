"""PlanExecutionWorkflow: a deterministic interpreter of a signed plan's durable steps.

Steps run in waves: every step whose ``after`` steps are done starts, and independent steps of a
wave run concurrently (``asyncio.gather`` of activities). Reads are ``poll`` activities; writes are
``write_step`` activities behind the idempotency ledger; a gate waits for the ``approve_gate`` /
``reject_gate`` update (token redeemed by an activity). When a write fails after other writes
succeeded, the registry's compensations run newest first (``compensate`` activity) — a saga.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from .models import (
        ApproveGate,
        CompensateCall,
        DoneWrite,
        PlanInput,
        PlanRunResult,
        RedeemCall,
        RejectGate,
        StepCall,
    )

__all__ = ["PlanExecutionWorkflow"]

_T = timedelta(seconds=60)
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

    @workflow.query
    def status(self) -> dict[str, str]:
        """Status per step (pending, running, waiting_approval, done, failed, compensated)."""
        return {str(k): v for k, v in sorted(self._status.items())}

    @workflow.update
    async def approve_gate(self, approval: ApproveGate) -> str:
        """Redeem the token for a waiting gate; the writes after it may run."""
        assert self._inp is not None
        choice = await workflow.execute_activity(
            "redeem_gate",
            RedeemCall(
                signed=self._inp.signed,
                user_id=self._inp.user_id,
                gate_id=approval.gate_id,
                token=approval.token,
            ),
            retry_policy=_ONCE,
            start_to_close_timeout=_T,
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
        assert self._inp is not None
        await workflow.execute_activity(
            "reject_gate",
            RedeemCall(
                signed=self._inp.signed,
                user_id=self._inp.user_id,
                gate_id=rejection.gate_id,
                token=rejection.reason or "rejected",
            ),
            retry_policy=_ONCE,
            start_to_close_timeout=_T,
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

    @workflow.run
    async def run(self, inp: PlanInput) -> PlanRunResult:
        self._inp = inp
        await workflow.execute_activity(
            "verify_plan", inp.signed, retry_policy=_ONCE, start_to_close_timeout=_T
        )
        graph = {int(s["step"]): s for s in inp.signed["plan"]["graph"]}
        self._status = dict.fromkeys(graph, "pending")
        outputs: dict[str, Any] = {}
        done_writes: list[DoneWrite] = []
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
                *(self._step(graph[n], outputs) for n in wave), return_exceptions=True
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
                    self._status[n] = "done"
                    if not graph[n]["dry_run"] and not graph[n].get("gate_id"):
                        done_writes.append(DoneWrite(step=n, result=dict(r.get("result") or {})))
                        outputs[str(n)] = r.get("result")
                    elif not graph[n].get("gate_id"):
                        outputs[str(n)] = r
            if closed is not None:
                return PlanRunResult.model_validate({"status": closed, "steps": self.status()})
            if failed is not None:
                compensated: list[int] = []
                if done_writes:
                    compensated = await workflow.execute_activity(
                        "compensate",
                        CompensateCall(
                            signed=inp.signed,
                            user_id=inp.user_id,
                            done=done_writes,
                            outputs=outputs,
                            choices=self._choices,
                        ),
                        retry_policy=RetryPolicy(maximum_attempts=5),
                        start_to_close_timeout=_T,
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

    async def _step(self, s: dict[str, Any], outputs: dict[str, Any]) -> Any:
        assert self._inp is not None
        n = int(s["step"])
        gate = s.get("gate_id")
        if gate:
            self._status[n] = "waiting_approval"
            try:
                await workflow.wait_condition(
                    lambda: gate in self._decisions,
                    timeout=timedelta(seconds=self._inp.approval_timeout_s),
                )
            except TimeoutError:
                raise _GateClosedError("approval_timeout") from None
            if self._decisions[gate] != "approved":
                raise _GateClosedError("rejected")
            return self._choices.get(gate)
        self._status[n] = "running"
        call = StepCall(
            signed=self._inp.signed,
            user_id=self._inp.user_id,
            step=n,
            outputs=dict(outputs),
            choices=dict(self._choices),
        )
        if s["dry_run"]:
            return await workflow.execute_activity(
                "poll",
                call,
                retry_policy=RetryPolicy(maximum_attempts=5),
                start_to_close_timeout=_T,
            )
        result = await workflow.execute_activity(
            "write_step", call, retry_policy=_WRITE, start_to_close_timeout=_T
        )
        return {"result": result}
