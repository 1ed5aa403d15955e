"""WatcherWorkflow: poll a read op for days within a budget, then gate → book → notify.

Deterministic (Temporal rules): all I/O in activities; time from ``workflow.now()``; jitter from
``workflow.random()``; state in one pydantic model carried across ContinueAsNew every
``continue_every`` polls, so a watcher polling every 15 minutes for 30 days (2,880 polls) never
comes near the 51,200-event history limit. Gates are updates: the validator rejects malformed,
wrong-gate, early or duplicate decisions without touching history; the handler redeems the token
through an activity before the write may run. A write whose outcome is unknown is never retried
blindly: the watcher waits in ``outcome_unknown`` for a person's ``resolve_step`` update.
Workflow code never ``assert``s: a broken input fails the run with an ``ApplicationError``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey
from temporalio.exceptions import ActivityError, ApplicationError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from .activities import DurableActivities
    from .models import (
        ApproveGate,
        CompensateCall,
        DoneWrite,
        FinishCall,
        ReconcileCall,
        Reconfigure,
        RedeemCall,
        RejectGate,
        ResolveStep,
        StepCall,
        WatchInput,
        WatchResult,
        WatchState,
    )
    from .summary import every, watch_now

__all__ = [
    "CANCEL_PATCH",
    "CANCEL_SIGNAL_RETIRED_PATCH",
    "FINISH_PATCH",
    "HOLD_SETTLES_PATCH",
    "POLL_COUNT",
    "STATE_ATTRIBUTES_PATCH",
    "UNKNOWN",
    "WATCH_STATE",
    "WatcherWorkflow",
    "finish",
    "not_started",
    "outcome_unknown",
    "publish_state",
    "settled_then_cancelled",
    "shielded",
]

_T = TypeVar("_T")

_POLL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=5),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=10),
    maximum_attempts=5,
)
_ONCE = RetryPolicy(maximum_attempts=1)
_WRITE = RetryPolicy(
    maximum_attempts=5,
    non_retryable_error_types=["idempotency_outcome_unknown", "provider_refused"],
)
#: the ApplicationError type of a write that may or may not have taken effect
UNKNOWN = "idempotency_outcome_unknown"


def outcome_unknown(e: ActivityError) -> bool:
    """True when an activity failed because a write's outcome is unknown (never retried)."""
    return isinstance(e.cause, ApplicationError) and e.cause.type == UNKNOWN


#: the patch that added ``finish_plan`` at the end of a run (histories before it replay without)
FINISH_PATCH = "finish-plan-v1"
#: a run cancelled through Temporal records its outcome before it ends CANCELED
CANCEL_PATCH = "cancel-records-outcome-v1"
#: the ``cancel`` signal no longer ends a watcher (it ended COMPLETED): Temporal's cancellation is
#: the one cancel path; histories where the signal ended the run replay the old branch
CANCEL_SIGNAL_RETIRED_PATCH = "cancel-signal-retired-v1"
#: a hold being placed when the run is cancelled is waited for (then released), not abandoned
HOLD_SETTLES_PATCH = "hold-settles-before-cancel-v1"
#: a watcher keeps the search attributes ``watch_state`` and ``poll_count`` current
STATE_ATTRIBUTES_PATCH = "watch-search-attributes-v1"

WATCH_STATE = SearchAttributeKey.for_keyword("watch_state")
POLL_COUNT = SearchAttributeKey.for_int("poll_count")
_PLAN_ID = SearchAttributeKey.for_keyword("plan_id")


def publish_state(state: str, polls: int) -> None:
    """Upsert ``watch_state`` and ``poll_count`` (from ``STATE_ATTRIBUTES_PATCH`` on), so the
    Temporal UI and ``temporal workflow list --query`` can find watchers by how they stand.

    Only on runs started with Countersign's search attributes (``start_watcher`` sets plan_id
    unless told not to): a namespace that lacks them would fail the workflow task on every try.
    """
    if workflow.info().typed_search_attributes.get(_PLAN_ID) is None:
        return
    if not workflow.patched(STATE_ATTRIBUTES_PATCH):
        return
    workflow.upsert_search_attributes([WATCH_STATE.value_set(state), POLL_COUNT.value_set(polls)])


async def finish(signed: dict[str, Any], user_id: str, outcome: str, timeout: timedelta) -> None:
    """Report the run's end to the plan store and the audit log (from ``FINISH_PATCH`` on)."""
    if workflow.patched(FINISH_PATCH):
        await workflow.execute_activity_method(
            DurableActivities.finish_plan,
            FinishCall(
                signed=signed,
                user_id=user_id,
                outcome=outcome,
                workflow_id=workflow.info().workflow_id,
            ),
            retry_policy=RetryPolicy(maximum_attempts=10),
            start_to_close_timeout=timeout,
            summary=f"record the outcome: {outcome}",
        )


async def record_cancel(
    signed: dict[str, Any], user_id: str, timeout: timedelta, stored: bool
) -> None:
    """Record a cancelled run's end; a cancel that came before the plan's first verify finished
    verifies (and so stores) the plan first — the end of a plan is recorded against its row."""
    if not stored:
        await workflow.execute_activity_method(
            DurableActivities.verify_plan,
            signed,
            retry_policy=_ONCE,
            start_to_close_timeout=timeout,
            summary="verify the signed plan",
        )
    await finish(signed, user_id, "cancelled", timeout)


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


def not_started(what: str) -> ApplicationError:
    """The error an update handler raises if it runs before ``run`` (validators prevent it)."""
    return ApplicationError(f"{what}: the workflow has not started", type="invalid_input")


@workflow.defn
class WatcherWorkflow:
    """One durable watcher (the visa use case's Watcher → gate → Booker → Notifier)."""

    def __init__(self) -> None:
        self._inp: WatchInput | None = None
        self._state: WatchState | None = None
        self._cancelled = False
        self._reconfigured = False
        self._decision: str | None = None
        self._choice: Any = None
        self._reject_reason: str | None = None
        self._resolving: set[int] = set()
        self._resolved: set[int] = set()
        self._unknown_call: StepCall | None = None

    # ---- interface ----------------------------------------------------------------------------
    @workflow.signal
    def cancel(self) -> None:
        """Retired: request Temporal's cancellation instead (``handle.cancel()``, the UI's
        "Request Cancellation", ``POST /v1/plans/<plan_id>/cancel``, the chat card), which
        records the outcome, releases a hold and ends the run CANCELED. This signal ended the run
        COMPLETED; since ``cancel-signal-retired-v1`` it only logs a warning. Histories in which
        it stopped a run replay that branch (the handler stays for them)."""
        if workflow.patched(CANCEL_SIGNAL_RETIRED_PATCH):
            workflow.logger.warning(
                "the cancel signal is retired and changes nothing: request cancellation "
                "(Temporal UI 'Request Cancellation', POST /v1/plans/<plan_id>/cancel)"
            )
            return
        self._cancelled = True

    @workflow.signal
    def reconfigure(self, change: Reconfigure) -> None:
        """A new poll interval, applied from the next poll (the window is signed: see
        ``Reconfigure``)."""
        if self._state is None:
            return
        if change.poll_interval_s is not None:
            self._state.poll_interval_s = change.poll_interval_s
        self._reconfigured = True

    @workflow.query
    def status(self) -> WatchState | None:
        """Polls done, last seen, next poll, status."""
        return self._state

    @workflow.update
    async def approve_gate(self, approval: ApproveGate) -> str:
        """Redeem the gate token (activity) and let the booking run with the person's choice."""
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
        if self._decision is None:
            self._choice = choice
            self._decision = "approved"
        return "approved"

    @approve_gate.validator
    def _validate_approve(self, approval: ApproveGate) -> None:
        self._validate_gate(approval.gate_id)

    @workflow.update
    async def reject_gate(self, rejection: RejectGate) -> str:
        """Record the rejection; the watcher ends without booking."""
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
        if self._decision is None:
            self._decision = "rejected"
            self._reject_reason = rejection.reason
        return "rejected"

    @reject_gate.validator
    def _validate_reject(self, rejection: RejectGate) -> None:
        self._validate_gate(rejection.gate_id)

    def _validate_gate(self, gate_id: str) -> None:
        if self._inp is None or self._state is None:
            raise ValueError("the watcher has not started")
        if gate_id != self._inp.gate_id:
            raise ValueError(f"this watcher's gate is {self._inp.gate_id}, not {gate_id}")
        if self._state.status != "waiting_approval":
            raise ValueError(f"nothing to decide yet (status {self._state.status})")
        if self._decision is not None:
            raise ValueError(f"{gate_id} was already decided ({self._decision})")

    @workflow.update
    async def resolve_step(self, resolution: ResolveStep) -> str:
        """A person settles the write whose outcome is unknown (after looking at the provider);
        the ledger records it (activity) and the step goes on: answered from the ledger when it
        happened, sent again under the same idempotency key when it did not."""
        if self._unknown_call is None:
            raise not_started("resolve_step")
        self._resolving.add(resolution.step)
        try:
            await workflow.execute_activity_method(
                DurableActivities.reconcile_step,
                ReconcileCall(
                    call=self._unknown_call,
                    outcome=resolution.outcome,
                    result=resolution.result,
                ),
                retry_policy=_ONCE,
                start_to_close_timeout=self._timeout(),
            )
        finally:
            self._resolving.discard(resolution.step)
        self._resolved.add(resolution.step)
        return resolution.outcome

    @resolve_step.validator
    def _validate_resolve(self, resolution: ResolveStep) -> None:
        if self._state is None or self._state.status != "outcome_unknown":
            raise ValueError("no write is waiting for a resolution")
        if resolution.step != self._state.unknown_step:
            raise ValueError(
                f"step {self._state.unknown_step} waits for a resolution, not {resolution.step}"
            )
        if resolution.step in self._resolving or resolution.step in self._resolved:
            raise ValueError(f"step {resolution.step} is already being resolved")

    # ---- run ----------------------------------------------------------------------------------
    @workflow.run
    async def run(self, inp: WatchInput) -> WatchResult:
        try:
            result = await self._run(inp)
        except (asyncio.CancelledError, ActivityError, ApplicationError) as e:
            # Temporal's own cancellation (the UI's "Request Cancellation", the API's cancel) —
            # raised as such, or as the cancelled activity it interrupted: record the outcome,
            # then end CANCELED (histories from before replay unchanged)
            if not is_cancelled_exception(e) or not workflow.patched(CANCEL_PATCH):
                raise
            stored = getattr(self, "_stored", False) or inp.state is not None
            await shielded(self._cancelled_end(inp, stored))
            raise asyncio.CancelledError from e
        await finish(inp.signed, inp.user_id, result.status, self._timeout())
        return result

    async def _cancelled_end(self, inp: WatchInput, stored: bool) -> None:
        """A run cancelled through Temporal: publish it, release the hold, record the outcome."""
        st = self._state
        publish_state("cancelled", st.polls if st else 0)
        await self._release(self._inp or inp)
        if st is not None:
            workflow.set_current_details(watch_now(st, ended="cancelled"))
        await record_cancel(inp.signed, inp.user_id, self._timeout(), stored)

    async def _run(self, inp: WatchInput) -> WatchResult:
        self._inp = inp
        now = workflow.now()
        state = inp.state
        if state is None:
            await workflow.execute_activity_method(
                DurableActivities.verify_plan,
                inp.signed,
                retry_policy=_ONCE,
                start_to_close_timeout=self._timeout(),
                summary="verify the signed plan",
            )
            self._stored = True
            if inp.start_gate_id is not None:  # approved when watching started: check it
                await workflow.execute_activity_method(
                    DurableActivities.require_gate,
                    RedeemCall(
                        signed=inp.signed,
                        user_id=inp.user_id,
                        gate_id=inp.start_gate_id,
                        token="approved at start",  # noqa: S106 (no token: the decision is read)
                    ),
                    retry_policy=_ONCE,
                    start_to_close_timeout=self._timeout(),
                )
            step_args = _step_args(inp.signed, inp.watch_step)
            state = WatchState(
                started_at=now,
                poll_interval_s=inp.poll_interval_s,
                date_from=str(step_args.get("date_from", "")),
                date_to=str(step_args.get("date_to", "")),
            )
            inp = inp.model_copy(update={"state": state})
            self._inp = inp
        st = self._state = state.model_copy(update={"polls_this_run": 0})
        publish_state(st.status, st.polls)

        while st.status == "watching":
            if self._cancelled:
                return await self._end(inp, "cancelled")
            elapsed = (workflow.now() - st.started_at).total_seconds()
            if st.polls >= inp.max_polls or elapsed >= inp.max_lifetime_s:
                return await self._end(inp, "budget_exhausted")
            if st.polls_this_run >= inp.continue_every:
                workflow.continue_as_new(inp.model_copy(update={"state": st}))
            try:
                seen = await workflow.execute_activity_method(
                    DurableActivities.poll,
                    StepCall(
                        signed=inp.signed,
                        user_id=inp.user_id,
                        step=inp.watch_step,
                        args_override={"date_from": st.date_from, "date_to": st.date_to},
                    ),
                    retry_policy=_POLL_RETRY,
                    start_to_close_timeout=self._timeout(),
                    summary=f"poll {st.polls + 1}: step {inp.watch_step}",
                )
                st.errors = 0
            except ActivityError as e:
                if is_cancelled_exception(e):
                    raise  # the run is being cancelled: not a failed poll
                seen = None
                st.errors += 1
            st.polls += 1
            st.polls_this_run += 1
            st.last_poll_at = workflow.now()
            st.last_seen = seen
            slots = seen.get("slots") if isinstance(seen, dict) else None
            if slots and inp.hold_step is not None and not await self._hold(inp, st, seen):
                slots = None  # taken before it could be held: keep watching
            if slots:
                st.found = slots[0]
                st.status = "waiting_approval"
                workflow.set_current_details(watch_now(st))
                publish_state(st.status, st.polls)
                break
            publish_state(st.status, st.polls)
            if st.polls >= inp.max_polls:
                return await self._end(inp, "budget_exhausted")  # no point sleeping first
            # interval with ±10 % jitter; after errors, back off exponentially (capped at 16x)
            base = st.poll_interval_s * (2 ** min(st.errors, 4))
            wait = base * (0.9 + 0.2 * workflow.random().random())
            if (workflow.now() - st.started_at).total_seconds() + wait > inp.max_lifetime_s:
                return await self._end(inp, "budget_exhausted")
            st.next_poll_at = workflow.now() + timedelta(seconds=wait)
            workflow.set_current_details(watch_now(st))
            self._reconfigured = False
            with contextlib.suppress(TimeoutError):  # the interval passed: poll again
                await workflow.wait_condition(
                    lambda: self._cancelled or self._reconfigured,
                    timeout=timedelta(seconds=wait),
                    timeout_summary=f"next poll ({every(st.poll_interval_s)})",
                )

        if st.status == "waiting_approval":
            try:
                await workflow.wait_condition(
                    lambda: self._decision is not None or self._cancelled,
                    timeout=timedelta(seconds=inp.approval_timeout_s),
                    timeout_summary=f"{inp.gate_id}: waiting for the person's decision",
                )
            except TimeoutError:
                return await self._end(inp, "approval_timeout")
            if self._cancelled and self._decision is None:
                return await self._end(inp, "cancelled")  # releases the hold
            if self._decision == "rejected":
                return await self._end(inp, "rejected")
        st.status = "booking"
        workflow.set_current_details(watch_now(st))
        publish_state(st.status, st.polls)
        booking = await self._write(
            StepCall(
                signed=inp.signed,
                user_id=inp.user_id,
                step=inp.book_step,
                choice=self._choice,
                gate_id=inp.gate_id,
            )
        )
        if _slot_id(self._choice) != _slot_id({"slot": st.found}):
            await self._release(inp)  # another slot was chosen: the held one goes back
        st.held = None  # booking the held slot ends its hold at the provider
        notified = await self._notify(inp, self._choice)
        st.status = "done"
        workflow.set_current_details(watch_now(st, ended="booked"))
        publish_state("booked", st.polls)
        return WatchResult(
            status="booked", polls=st.polls, booking_id=_booking_id(booking), notified=notified
        )

    def _timeout(self) -> timedelta:
        return timedelta(seconds=self._inp.activity_timeout_s if self._inp else 60)

    async def _write(self, call: StepCall) -> Any:
        """Run a write step; if its outcome is unknown, wait (status ``outcome_unknown``) for a
        person's ``resolve_step`` and then run it again — answered from the ledger, or sent again
        under the same key. Never a blind retry."""
        st = self._state
        while True:
            try:
                return await workflow.execute_activity_method(
                    DurableActivities.write_step,
                    call,
                    retry_policy=_WRITE,
                    start_to_close_timeout=self._timeout(),
                    summary=_write_summary(call),
                )
            except ActivityError as e:
                if st is None or not outcome_unknown(e):
                    raise
            before = st.status
            st.status, st.unknown_step = "outcome_unknown", call.step
            publish_state(st.status, st.polls)
            self._unknown_call = call
            self._resolved.discard(call.step)
            await workflow.wait_condition(lambda: call.step in self._resolved)
            st.status, st.unknown_step = before, None
            self._unknown_call = None

    async def _hold(self, inp: WatchInput, st: WatchState, seen: Any) -> bool:
        """Hold what the poll found (a write under the gate approved at start) and mail the link
        to the card; False when the provider refused the hold (someone took the slot)."""
        if inp.hold_step is None:
            return True
        call = StepCall(
            signed=inp.signed,
            user_id=inp.user_id,
            step=inp.hold_step,
            gate_id=inp.start_gate_id,
            outputs={str(inp.watch_step): seen},
        )

        async def place() -> None:
            held = await self._write(call)
            st.held, st.found_in = dict(held or {}), seen

        try:
            if workflow.patched(HOLD_SETTLES_PATCH):
                # a cancellation while the hold is being placed waits for its answer (the
                # provider may hold the slot either way), so the clean-up can release it
                await settled_then_cancelled(place())
            else:  # histories from before: the cancellation abandoned the hold in flight
                await place()
        except ActivityError as e:
            refused = isinstance(e.cause, ApplicationError) and e.cause.type == "provider_refused"
            if is_cancelled_exception(e) or not refused:
                raise
            return False
        if inp.notice_step is not None:
            await self._write(
                StepCall(
                    signed=inp.signed,
                    user_id=inp.user_id,
                    step=inp.notice_step,
                    gate_id=inp.start_gate_id,
                )
            )
        return True

    async def _release(self, inp: WatchInput) -> None:
        """Release the hold (the hold's registry compensation, at most once) unless it was
        booked; called when the person rejects, does not decide in time, or cancels."""
        st = self._state
        if st is None or st.held is None or inp.hold_step is None:
            return
        await workflow.execute_activity_method(
            DurableActivities.compensate,
            CompensateCall(
                signed=inp.signed,
                user_id=inp.user_id,
                done=[DoneWrite(step=inp.hold_step, result=st.held)],
                outputs={str(inp.watch_step): st.found_in},
            ),
            retry_policy=RetryPolicy(maximum_attempts=5),
            start_to_close_timeout=self._timeout(),
            summary=f"release the hold of step {inp.hold_step}",
        )
        st.held = None

    async def _notify(self, inp: WatchInput, choice: Any) -> bool:
        if inp.notify_step is None:
            return False
        await self._write(
            StepCall(
                signed=inp.signed,
                user_id=inp.user_id,
                step=inp.notify_step,
                choice=choice,
                gate_id=inp.gate_id,
            )
        )
        return True

    async def _end(self, inp: WatchInput, status: str) -> WatchResult:
        await self._release(inp)
        st = self._state
        polls = st.polls if st is not None else 0
        notified = False
        if (
            status in {"rejected", "approval_timeout", "budget_exhausted"}
            and inp.notify_step is not None
            # the end notice rewrote the signed mail's subject and body without an approval;
            # runs from before this change replay the old branch (and the activity now refuses
            # any argument the plan did not sign)
            and not workflow.patched("no-unsigned-end-notice-v1")
        ):
            # the notification step tells the person what happened (its own idempotency key)
            await self._write(
                StepCall(
                    signed=inp.signed,
                    user_id=inp.user_id,
                    step=inp.notify_step,
                    gate_id=inp.gate_id,
                    args_override={
                        "subject": f"Watcher ended: {status.replace('_', ' ')}",
                        "body": f"No booking was made ({status.replace('_', ' ')}).",
                    },
                )
            )
            notified = True
        if st is not None:
            st.status = "done"
            workflow.set_current_details(watch_now(st, ended=status))
        publish_state(status, polls)
        return WatchResult.model_validate({"status": status, "polls": polls, "notified": notified})


def _step_args(signed: dict[str, Any], step: int) -> dict[str, Any]:
    graph = signed.get("plan", {}).get("graph", [])
    if not 1 <= step <= len(graph):
        raise ApplicationError(f"plan has no step {step}", type="invalid_input", non_retryable=True)
    args: dict[str, Any] = graph[step - 1].get("args", {})
    return args


def _write_summary(call: StepCall) -> str:
    """``write step 3 (visa.sandbox.hold_slot) · approved at gate-A`` — what the Temporal UI
    shows on the activity (metadata only: histories replay unchanged)."""
    graph: list[dict[str, Any]] = call.signed.get("plan", {}).get("graph", [])
    step: dict[str, Any] = next((s for s in graph if s.get("step") == call.step), {})
    what = f"{step.get('uses', '?')}.{step.get('call', '?')}"
    gate = f" · approved at {call.gate_id}" if call.gate_id else ""
    return f"write step {call.step} ({what}){gate}"[:200]


def _slot_id(choice: Any) -> str | None:
    slot = choice.get("slot") if isinstance(choice, dict) else None
    if isinstance(slot, dict):
        return str(slot.get("id"))
    return None if slot is None else str(slot)


def _booking_id(booking: Any) -> str | None:
    if isinstance(booking, dict):
        out = booking.get("output")
        if isinstance(out, dict) and out.get("id") is not None:
            return str(out["id"])
        if booking.get("id") is not None:
            return str(booking["id"])
    return None
