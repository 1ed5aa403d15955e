"""WatcherWorkflow: poll a read op for days within a budget, then gate → book → notify.

Deterministic (Temporal rules): all I/O in activities; time from ``workflow.now()``; jitter from
``workflow.random()``; state in one pydantic model carried across ContinueAsNew every
``continue_every`` polls, so a watcher polling every 15 minutes for 30 days (2,880 polls) never
comes near the 51,200-event history limit. Gates are updates: the validator rejects malformed,
wrong-gate, early or duplicate decisions without touching history; the handler redeems the token
through an activity before the write may run. A write whose outcome is unknown is never retried
blindly: the watcher waits in ``outcome_unknown`` for a person's ``resolve_step`` update.
Workflow code never ``assert``s: a broken input fails the run with an ``ApplicationError``.

What was found is what the watched op's registry ``offers`` lists (``offers.py``): the watcher
knows no use case's fields. One run reads as its steps (DurableOrchestrator LLD, "Watcher loop"):
``_begin`` → ``_watch`` (``_stop_before_poll``, ``_poll``, ``_found``, ``_wait``) →
``_decided`` → ``_book``; ``_end`` for every other ending.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey
from temporalio.exceptions import ActivityError, ApplicationError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from countersign.kernel import SignedPlan

    from .activities import DurableActivities
    from .models import (
        ApproveGate,
        CompensateCall,
        DoneWrite,
        Reconfigure,
        RedeemCall,
        RejectGate,
        ResolveStep,
        StepCall,
        WatchInput,
        WatchResult,
        WatchState,
    )
    from .offers import offered, picks
    from .patches import (
        CANCEL_SIGNAL_RETIRED_PATCH,
        HOLD_SETTLES_PATCH,
        NO_UNSIGNED_END_NOTICE_PATCH,
        STATE_ATTRIBUTES_PATCH,
    )
    from .summary import every, watch_now, write_summary
    from .workflow_steps import (
        ONCE,
        POLICY_REFUSED,
        Resolutions,
        cancel_recorded,
        error_type,
        finish,
        record_cancel,
        record_rejection,
        redeem,
        refuse_token,
        settled_then_cancelled,
        verify,
    )

__all__ = ["POLL_COUNT", "WATCH_STATE", "WatcherWorkflow", "publish_state"]

_POLL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=5),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=10),
    maximum_attempts=5,
)

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


@workflow.defn(name="WatcherWorkflow")  # the workflow type: never renamed (runs in flight)
class WatcherWorkflow:
    """One durable watcher (the visa use case's Watcher → gate → Booker → Notifier)."""

    def __init__(self) -> None:
        self._inp: WatchInput | None = None
        self._state: WatchState | None = None
        self._stored = False
        self._cancelled = False
        self._reconfigured = False
        self._decision: str | None = None
        self._choice: Any = None
        self._resolutions = Resolutions()

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
        """Confirm the person's approval (activity; the token was spent where it arrived) and let
        the booking run with their choice."""
        choice = await redeem(self._inp, approval, self._timeout())
        if self._decision is None:
            self._choice = choice
            self._decision = "approved"
        return "approved"

    @approve_gate.validator
    def _validate_approve(self, approval: ApproveGate) -> None:
        refuse_token(approval)
        self._validate_gate(approval.gate_id)

    @workflow.update
    async def reject_gate(self, rejection: RejectGate) -> str:
        """Record the rejection; the watcher ends without booking."""
        await record_rejection(self._inp, rejection, self._timeout())
        if self._decision is None:
            self._decision = "rejected"
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
        return await self._resolutions.resolve(resolution, self._timeout())

    @resolve_step.validator
    def _validate_resolve(self, resolution: ResolveStep) -> None:
        if self._state is None or self._state.status != "outcome_unknown":
            raise ValueError("no write is waiting for a resolution")
        if resolution.step != self._state.unknown_step:
            raise ValueError(
                f"step {self._state.unknown_step} waits for a resolution, not {resolution.step}"
            )
        self._resolutions.check(resolution)

    # ---- run ----------------------------------------------------------------------------------
    @workflow.run
    async def run(self, inp: WatchInput) -> WatchResult:
        result = await cancel_recorded(self._run(inp), lambda: self._cancelled_end(inp))
        await finish(inp.signed, inp.user_id, result.status, self._timeout())
        return result

    async def _cancelled_end(self, inp: WatchInput) -> None:
        """A run cancelled through Temporal: publish it, release the hold, record the outcome."""
        stored = self._stored or inp.state is not None
        st = self._state
        publish_state("cancelled", st.polls if st else 0)
        await self._release(self._inp or inp)
        if st is not None:
            workflow.set_current_details(watch_now(st, ended="cancelled"))
        await record_cancel(inp.signed, inp.user_id, self._timeout(), stored)

    async def _run(self, inp: WatchInput) -> WatchResult:
        """The run; a write the policy's gate rules refuse ends it ``refused`` (the hold
        released, the end recorded), never retried."""
        try:
            return await self._steps(inp)
        except ActivityError as e:
            if error_type(e) != POLICY_REFUSED:
                raise
            workflow.logger.warning("a write was refused by the policy: %s", e.cause)
            return await self._end(self._inp or inp, "refused")

    async def _steps(self, inp: WatchInput) -> WatchResult:
        inp = await self._begin(inp)
        st = self._watching()
        ended = await self._watch(inp, st)
        if ended is None and st.status == "waiting_approval":
            ended = await self._decided(inp)
        if ended is not None:
            return await self._end(inp, ended)
        return await self._book(inp, st)

    def _watching(self) -> WatchState:
        if self._state is None:  # _begin sets it
            raise ApplicationError("the watcher has no state", type="invalid_input")
        return self._state

    async def _begin(self, inp: WatchInput) -> WatchInput:
        """The first run verifies the plan (and a gate approved at start) and makes the state;
        a run continued-as-new goes on with the state it was given."""
        self._inp = inp
        now = workflow.now()
        state = inp.state
        if state is None:
            await verify(inp.signed, self._timeout())
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
                    retry_policy=ONCE,
                    start_to_close_timeout=self._timeout(),
                )
            _check_step(inp.signed, inp.watch_step)
            state = WatchState(started_at=now, poll_interval_s=inp.poll_interval_s)
            inp = inp.model_copy(update={"state": state})
            self._inp = inp
        st = self._state = state.model_copy(update={"polls_this_run": 0})
        publish_state(st.status, st.polls)
        return inp

    async def _watch(self, inp: WatchInput, st: WatchState) -> str | None:
        """Poll until something is found (None) or the run ends (how)."""
        while st.status == "watching":
            ended = self._stop_before_poll(inp, st)
            if ended is not None:
                return ended
            seen = await self._poll(inp, st)
            if await self._found(inp, st, seen):
                return None
            publish_state(st.status, st.polls)
            if st.polls >= inp.max_polls:
                return "budget_exhausted"  # no point sleeping first
            # interval with ±10 % jitter; after errors, back off exponentially (capped at 16x)
            base = st.poll_interval_s * (2 ** min(st.errors, 4))
            wait = base * (0.9 + 0.2 * workflow.random().random())
            if (workflow.now() - st.started_at).total_seconds() + wait > inp.max_lifetime_s:
                return "budget_exhausted"
            await self._wait(st, wait)
        return None

    def _stop_before_poll(self, inp: WatchInput, st: WatchState) -> str | None:
        """Cancelled (the retired signal, replay only) or out of budget; ContinueAsNew every
        ``continue_every`` polls of this run."""
        if self._cancelled:
            return "cancelled"
        elapsed = (workflow.now() - st.started_at).total_seconds()
        if st.polls >= inp.max_polls or elapsed >= inp.max_lifetime_s:
            return "budget_exhausted"
        if st.polls_this_run >= inp.continue_every:
            workflow.continue_as_new(inp.model_copy(update={"state": st}))
        return None

    async def _poll(self, inp: WatchInput, st: WatchState) -> Any:
        """One poll of the watched step with its signed arguments; None after a failed poll
        (it counts toward the budget and backs off the next wait)."""
        try:
            seen = await workflow.execute_activity_method(
                DurableActivities.poll,
                StepCall(signed=inp.signed, user_id=inp.user_id, step=inp.watch_step),
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
        return seen

    async def _found(self, inp: WatchInput, st: WatchState, seen: Any) -> bool:
        """Whether the poll found something to decide on (held first, when the plan holds)."""
        found = offered(seen, inp.offers)
        if found and inp.hold_step is not None and not await self._hold(inp, st, seen):
            found = []  # taken before it could be held: keep watching
        if not found:
            return False
        st.found = found[0]
        st.status = "waiting_approval"
        workflow.set_current_details(watch_now(st))
        publish_state(st.status, st.polls)
        return True

    async def _wait(self, st: WatchState, wait: float) -> None:
        """The interval before the next poll; a reconfigure (or the retired cancel) ends it."""
        st.next_poll_at = workflow.now() + timedelta(seconds=wait)
        workflow.set_current_details(watch_now(st))
        self._reconfigured = False
        with contextlib.suppress(TimeoutError):  # the interval passed: poll again
            await workflow.wait_condition(
                lambda: self._cancelled or self._reconfigured,
                timeout=timedelta(seconds=wait),
                timeout_summary=f"next poll ({every(st.poll_interval_s)})",
            )

    async def _decided(self, inp: WatchInput) -> str | None:
        """Wait for the person's decision: None when approved, else how the run ends."""
        try:
            await workflow.wait_condition(
                lambda: self._decision is not None or self._cancelled,
                timeout=timedelta(seconds=inp.approval_timeout_s),
                timeout_summary=f"{inp.gate_id}: waiting for the person's decision",
            )
        except TimeoutError:
            return "approval_timeout"
        if self._cancelled and self._decision is None:
            return "cancelled"  # releases the hold
        if self._decision == "rejected":
            return "rejected"
        return None

    async def _book(self, inp: WatchInput, st: WatchState) -> WatchResult:
        """Approved: book with the person's choice, give back a hold on another offer, notify."""
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
        if not picks(self._choice, st.found, inp.offers):
            await self._release(inp)  # another offer was chosen: the held one goes back
        st.held = None  # booking the held offer ends its hold at the provider
        notified = await self._notify(inp, self._choice, booking)
        st.status = "done"
        workflow.set_current_details(watch_now(st, ended="booked"))
        publish_state("booked", st.polls)
        return WatchResult(
            status="booked", polls=st.polls, booking_id=_result_id(booking), notified=notified
        )

    def _timeout(self) -> timedelta:
        return timedelta(seconds=self._inp.activity_timeout_s if self._inp else 60)

    async def _write(self, call: StepCall) -> Any:
        """Run a write step; an unknown outcome waits (status ``outcome_unknown``) for a person's
        ``resolve_step`` (``Resolutions.write``). Never a blind retry."""
        st = self._watching()
        before = st.status

        def unknown(waiting: bool) -> None:
            nonlocal before
            if waiting:
                before = st.status
                st.status, st.unknown_step = "outcome_unknown", call.step
                publish_state(st.status, st.polls)
            else:
                st.status, st.unknown_step = before, None

        return await self._resolutions.write(
            call, timeout=self._timeout(), summary=write_summary(call), unknown=unknown
        )

    async def _hold(self, inp: WatchInput, st: WatchState, seen: Any) -> bool:
        """Hold what the poll found (a write under the gate approved at start) and mail the link
        to the card; False when the provider refused the hold (someone took it)."""
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
                # provider may hold it either way), so the clean-up can release it
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

    async def _notify(self, inp: WatchInput, choice: Any, booking: Any) -> bool:
        """The confirmation; the booking's output goes with it, for a mail that says which
        appointment was booked (a signed ``{$ref: steps.<book>.output}``; a plan that does not
        refer to it ignores it)."""
        if inp.notify_step is None:
            return False
        await self._write(
            StepCall(
                signed=inp.signed,
                user_id=inp.user_id,
                step=inp.notify_step,
                choice=choice,
                gate_id=inp.gate_id,
                outputs={str(inp.book_step): _output_of(booking)},
            )
        )
        return True

    async def _end(self, inp: WatchInput, status: str) -> WatchResult:
        """Every ending but a booking: release the hold, publish how it ended."""
        await self._release(inp)
        st = self._state
        polls = st.polls if st is not None else 0
        notified = False
        notify = inp.notify_step
        if (
            status in {"rejected", "approval_timeout", "budget_exhausted"}
            and notify is not None
            # the end notice rewrote the signed mail's subject and body without an approval;
            # runs from before this change replay the old branch (and the activity now refuses
            # any argument the plan did not sign)
            and not workflow.patched(NO_UNSIGNED_END_NOTICE_PATCH)
        ):
            await self._end_notice(inp, notify, status)
            notified = True
        if st is not None:
            st.status = "done"
            workflow.set_current_details(watch_now(st, ended=status))
        publish_state(status, polls)
        return WatchResult.model_validate({"status": status, "polls": polls, "notified": notified})

    async def _end_notice(self, inp: WatchInput, step: int, status: str) -> None:
        """Replay only (before ``no-unsigned-end-notice-v1``): the notification step told the
        person how the run ended (its own idempotency key)."""
        said = status.replace("_", " ")
        await self._write(
            StepCall(
                signed=inp.signed,
                user_id=inp.user_id,
                step=step,
                gate_id=inp.gate_id,
                args_override={
                    "subject": f"Watcher ended: {said}",
                    "body": f"No booking was made ({said}).",
                },
            )
        )


def _check_step(signed: SignedPlan, step: int) -> None:
    """The watched step is one of the plan's (else the input is broken: the run fails)."""
    if not 1 <= step <= len(signed.plan.graph):
        raise ApplicationError(f"plan has no step {step}", type="invalid_input", non_retryable=True)


def _output_of(result: Any) -> Any:
    """What a write's ledger result shows as the step's output (``steps.step_output``)."""
    return result["output"] if isinstance(result, dict) and "output" in result else result


def _result_id(result: Any) -> str | None:
    """The id of what a write made (its output's ``id``, or its own)."""
    if isinstance(result, dict):
        out = result.get("output")
        if isinstance(out, dict) and out.get("id") is not None:
            return str(out["id"])
        if result.get("id") is not None:
            return str(result["id"])
    return None
