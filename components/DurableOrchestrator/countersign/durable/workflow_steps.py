"""What both durable workflows do the same way: decide a gate, settle a write whose outcome is
unknown, record how the run ended, and survive a second cancellation while cleaning up.

Workflow code (Temporal rules, DurableOrchestrator LLD "Determinism"): every I/O is an activity
called by reference, no clock but ``workflow.now()``, no ``assert``. Each helper sends exactly the
commands the two workflows sent before they shared it, in the same order, so recorded histories
replay unchanged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, Protocol, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from countersign.kernel import SignedPlan

    from .activities import DurableActivities
    from .models import (
        ApproveGate,
        ConfirmCall,
        FinishCall,
        ReconcileCall,
        RedeemCall,
        RejectCall,
        RejectGate,
        ResolveStep,
        StepCall,
    )
    from .patches import CANCEL_PATCH, FINISH_PATCH, LOCAL_ACTIVITIES_PATCH

__all__ = [
    "ONCE",
    "POLICY_REFUSED",
    "UNKNOWN",
    "WRITE",
    "Resolutions",
    "cancel_recorded",
    "error_type",
    "finish",
    "local_activities",
    "not_started",
    "outcome_unknown",
    "record_cancel",
    "record_rejection",
    "redeem",
    "refuse_token",
    "settled_then_cancelled",
    "shielded",
    "verify",
]

_T = TypeVar("_T")

#: the ApplicationError type of a write that may or may not have taken effect
UNKNOWN = "idempotency_outcome_unknown"
ONCE = RetryPolicy(maximum_attempts=1)
WRITE = RetryPolicy(maximum_attempts=5, non_retryable_error_types=[UNKNOWN, "provider_refused"])


#: the ApplicationError type of a write the policy's gate rules refused (never retried)
POLICY_REFUSED = "policy_refused"


def error_type(e: BaseException) -> str | None:
    """The ApplicationError type behind a failed activity (None for anything else)."""
    cause = e.cause if isinstance(e, ActivityError) else e
    return cause.type if isinstance(cause, ApplicationError) else None


def outcome_unknown(e: ActivityError) -> bool:
    """True when an activity failed because a write's outcome is unknown (never retried)."""
    return isinstance(e.cause, ApplicationError) and e.cause.type == UNKNOWN


def not_started(what: str) -> ApplicationError:
    """The error an update handler raises if it runs before ``run`` (validators prevent it)."""
    return ApplicationError(f"{what}: the workflow has not started", type="invalid_input")


# ---- gates ---------------------------------------------------------------------------------------
class _Run(Protocol):
    """What a gate's handler needs of a run's input (``WatchInput``, ``PlanInput``)."""

    @property
    def signed(self) -> SignedPlan: ...

    @property
    def user_id(self) -> str: ...


def refuse_token(approval: ApproveGate) -> None:
    """The validators' rule: an update that carries a token is refused before it is recorded, so
    no token enters the history (tokens are redeemed where they arrive: ``approval_for``).
    Validators do not run on replay, so recorded token updates still replay."""
    if approval.token is not None:
        raise ValueError(
            "approval tokens are redeemed where they arrive, never sent to a workflow: send "
            "the spent token's hash as approval (durable.approval_for)"
        )


async def redeem(inp: _Run | None, approval: ApproveGate, timeout: timedelta) -> Any:
    """Confirm the person's approval of the gate (activity: the token was spent where it
    arrived; the update names it by its hash); the choice stored with it. An update recorded
    with the token itself (histories from before) redeems it as it did then."""
    if inp is None:
        raise not_started("approve_gate")
    if approval.token is not None:
        return await workflow.execute_activity_method(
            DurableActivities.redeem_gate,
            RedeemCall(
                signed=inp.signed,
                user_id=inp.user_id,
                gate_id=approval.gate_id,
                token=approval.token,
            ),
            retry_policy=ONCE,
            start_to_close_timeout=timeout,
            summary=f"{approval.gate_id}: redeem the person's approval",
        )
    return await workflow.execute_activity_method(
        DurableActivities.confirm_gate,
        ConfirmCall(
            signed=inp.signed,
            user_id=inp.user_id,
            gate_id=approval.gate_id,
            approval=approval.approval or "",
        ),
        retry_policy=ONCE,
        start_to_close_timeout=timeout,
        summary=f"{approval.gate_id}: confirm the person's approval",
    )


async def record_rejection(inp: _Run | None, rejection: RejectGate, timeout: timedelta) -> None:
    """Record the person's rejection of the gate (activity; a signed receipt)."""
    if inp is None:
        raise not_started("reject_gate")
    await workflow.execute_activity_method(
        DurableActivities.reject_gate,
        RejectCall(
            signed=inp.signed,
            user_id=inp.user_id,
            gate_id=rejection.gate_id,
            reason=rejection.reason or "rejected",
        ),
        retry_policy=ONCE,
        start_to_close_timeout=timeout,
        summary=f"{rejection.gate_id}: record the person's rejection",
    )


# ---- writes whose outcome is unknown -------------------------------------------------------------
class Resolutions:
    """The writes waiting in ``outcome_unknown`` and a person's ``resolve_step`` for each.

    ``write`` runs a write step; when its outcome is unknown it waits — never a blind retry —
    until ``resolve`` has settled the ledger key (``reconcile_step`` activity), then runs the
    step again: answered from the ledger, or sent again under the same idempotency key."""

    def __init__(self) -> None:
        self.waiting: dict[int, StepCall] = {}
        self._resolving: set[int] = set()
        self._resolved: set[int] = set()

    def check(self, resolution: ResolveStep) -> None:
        """The update validator's last check: a step is resolved once."""
        if resolution.step in self._resolving or resolution.step in self._resolved:
            raise ValueError(f"step {resolution.step} is already being resolved")

    async def resolve(self, resolution: ResolveStep, timeout: timedelta) -> str:
        """Settle the waiting write's ledger key as the person says; the step then goes on."""
        call = self.waiting.get(resolution.step)
        if call is None:
            raise not_started("resolve_step")
        self._resolving.add(resolution.step)
        try:
            await workflow.execute_activity_method(
                DurableActivities.reconcile_step,
                ReconcileCall(call=call, outcome=resolution.outcome, result=resolution.result),
                retry_policy=ONCE,
                start_to_close_timeout=timeout,
            )
        finally:
            self._resolving.discard(resolution.step)
        self._resolved.add(resolution.step)
        return resolution.outcome

    async def write(
        self,
        call: StepCall,
        *,
        timeout: timedelta,
        summary: str,
        unknown: Callable[[bool], None],
    ) -> Any:
        """The write's result; ``unknown(True)`` when it starts waiting for a person,
        ``unknown(False)`` when it was resolved and runs again."""
        while True:
            try:
                return await workflow.execute_activity_method(
                    DurableActivities.write_step,
                    call,
                    retry_policy=WRITE,
                    start_to_close_timeout=timeout,
                    summary=summary,
                )
            except ActivityError as e:
                if not outcome_unknown(e):
                    raise
            unknown(True)
            self.waiting[call.step] = call
            self._resolved.discard(call.step)
            await workflow.wait_condition(lambda: call.step in self._resolved)
            self.waiting.pop(call.step, None)
            unknown(False)


# ---- how a run ends ------------------------------------------------------------------------------
def local_activities() -> bool:
    """Whether ``verify_plan`` and ``finish_plan`` run as local activities (from
    ``LOCAL_ACTIVITIES_PATCH`` on): both are short work on the worker's own Postgres, so they run
    in the workflow task that asks for them — no activity task to match, no workflow task to
    carry the result back, no plan payload in the history. Histories recorded before replay them
    as activity tasks (the first call decides for the whole run)."""
    return workflow.patched(LOCAL_ACTIVITIES_PATCH)


async def finish(signed: SignedPlan, user_id: str, outcome: str, timeout: timedelta) -> None:
    """Report the run's end to the plan store and the audit log (from ``FINISH_PATCH`` on)."""
    if not workflow.patched(FINISH_PATCH):
        return
    call = FinishCall(
        signed=signed, user_id=user_id, outcome=outcome, workflow_id=workflow.info().workflow_id
    )
    retry = RetryPolicy(maximum_attempts=10)
    summary = f"record the outcome: {outcome}"
    if local_activities():
        await workflow.execute_local_activity_method(
            DurableActivities.finish_plan,
            call,
            retry_policy=retry,
            start_to_close_timeout=timeout,
            summary=summary,
        )
        return
    await workflow.execute_activity_method(
        DurableActivities.finish_plan,
        call,
        retry_policy=retry,
        start_to_close_timeout=timeout,
        summary=summary,
    )


async def verify(signed: SignedPlan, timeout: timedelta) -> None:
    """Verify (and store) the signed plan: every run's first activity (local from
    ``LOCAL_ACTIVITIES_PATCH`` on)."""
    if local_activities():
        await workflow.execute_local_activity_method(
            DurableActivities.verify_plan,
            signed,
            retry_policy=ONCE,
            start_to_close_timeout=timeout,
            summary="verify the signed plan",
        )
        return
    await workflow.execute_activity_method(
        DurableActivities.verify_plan,
        signed,
        retry_policy=ONCE,
        start_to_close_timeout=timeout,
        summary="verify the signed plan",
    )


async def record_cancel(signed: SignedPlan, user_id: str, timeout: timedelta, stored: bool) -> None:
    """Record a cancelled run's end; a cancel that came before the plan's first verify finished
    verifies (and so stores) the plan first — the end of a plan is recorded against its row."""
    if not stored:
        await verify(signed, timeout)
    await finish(signed, user_id, "cancelled", timeout)


async def cancel_recorded(run: Awaitable[_T], clean_up: Callable[[], Awaitable[None]]) -> _T:
    """``run``'s result; Temporal's own cancellation (the UI's "Request Cancellation", the API's
    cancel) — raised as such, or as the cancelled activity it interrupted — runs ``clean_up``
    shielded (it records the outcome), then ends the run CANCELED (from ``CANCEL_PATCH`` on:
    histories from before replay the failure as it was)."""
    try:
        return await run
    except (asyncio.CancelledError, ActivityError, ApplicationError) as e:
        if not is_cancelled_exception(e) or not workflow.patched(CANCEL_PATCH):
            raise
        await shielded(clean_up())
        raise asyncio.CancelledError from e


async def shielded(work: Awaitable[_T]) -> _T:
    """Run ``work`` (the clean-up of a cancelled run: release holds, record the outcome) to its
    end, even if another cancellation reaches the run meanwhile — a second "Request Cancellation"
    must not leave a hold placed or the outcome unrecorded. ``asyncio.shield`` keeps the inner
    task running; the loop waits for it instead of giving up at the first ``CancelledError``.
    Deterministic: no timer or command of its own, the activities inside are the commands."""
    task = asyncio.ensure_future(work)
    while True:
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done():
                raise  # the work itself was cancelled (it cannot be here: nothing cancels it)


async def settled_then_cancelled(work: Awaitable[_T]) -> _T:
    """Let ``work`` (a write whose effect the run must know, e.g. placing a hold) finish even if
    the run is cancelled meanwhile — its activity is not cancelled — then raise that
    cancellation, so the clean-up sees what the write did. Without a cancellation it is a plain
    ``await``; a failure of ``work`` after a cancellation raises the cancellation (from it)."""
    task = asyncio.ensure_future(work)
    pending: asyncio.CancelledError | None = None
    while True:
        try:
            result = await asyncio.shield(task)
        except asyncio.CancelledError as e:
            if task.done():
                raise
            pending = e
            continue
        except BaseException as e:
            if pending is not None:
                raise pending from e
            raise
        if pending is not None:
            raise pending
        return result
