"""Inputs, state and results of the durable workflows (one pydantic model each).

Every model that names a plan carries the typed ``SignedPlan`` (Kernel): it becomes JSON only
where Temporal stores a payload (the pydantic data converter, sealed by ``codec.py``), and a
payload recorded as a plain signed-plan document — every history from before — parses into it.
Activities verify it (``verify_signed_plan`` over its ``to_json()``) before anything runs.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator

from countersign.kernel import SignedPlan
from countersign.registry import Offers


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


#: fields ``WatchState`` once carried: the watched step's window, copied from its signed args
#: when the poll could be told another one (it cannot: a change of what is polled is a new plan
#: revision, and activities refuse any argument the plan did not sign)
RETIRED_STATE_FIELDS = frozenset({"date_from", "date_to"})


class WatchState(_M):
    """Everything the watcher must carry across ContinueAsNew."""

    started_at: datetime
    polls: int = 0
    polls_this_run: int = 0
    errors: int = 0
    last_seen: Any = None
    last_poll_at: datetime | None = None
    next_poll_at: datetime | None = None
    poll_interval_s: int
    found: Any = None
    status: Literal["watching", "waiting_approval", "booking", "outcome_unknown", "done"] = (
        "watching"
    )
    #: the hold on what was found (the hold write's result), released unless it is booked
    held: dict[str, Any] | None = None
    #: what the poll that found it returned (the hold's and the release's references read it)
    found_in: Any = None
    #: the write whose outcome is unknown, waiting for a person's ``resolve_step``
    unknown_step: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _drop_retired(cls, data: Any) -> Any:
        """A state carried across ContinueAsNew by an earlier version may still hold fields it
        no longer has (``RETIRED_STATE_FIELDS``): they are dropped, not refused, so such runs go
        on (DurableOrchestrator LLD, "Determinism")."""
        if isinstance(data, dict) and RETIRED_STATE_FIELDS & data.keys():
            return {k: v for k, v in data.items() if k not in RETIRED_STATE_FIELDS}
        return data


class WatchInput(_M):
    """Start a watcher for a signed plan's durable Watcher → gate → Booker → Notifier steps."""

    signed: SignedPlan
    user_id: str
    watch_step: int
    gate_id: str
    book_step: int
    notify_step: int | None = None
    #: a gate approved when watching starts (its token spent by the execute that handed off),
    #: guarding ``hold_step`` (hold what was found) and ``notice_step`` (mail a link to the card)
    start_gate_id: str | None = None
    hold_step: int | None = None
    notice_step: int | None = None
    #: what the watched op offers (its registry ``offers``, PluginRegistry): which list of a
    #: poll's output holds what was found and how a choice picks one. None — runs started before
    #: it was carried, or an op that declares none — reads the first non-empty list
    #: (``offers.offered``), the rule the ``poll`` activity audits ``found`` by
    offers: Offers | None = None
    poll_interval_s: int = Field(default=900, ge=1)
    max_polls: int = Field(default=2000, ge=1)
    max_lifetime_s: int = Field(default=30 * 86400, ge=1)
    continue_every: int = Field(default=100, ge=1)
    approval_timeout_s: int = Field(default=86400, ge=1)
    #: start-to-close timeout of each activity (a lost worker is noticed after this long)
    activity_timeout_s: int = Field(default=60, ge=1, le=3600)
    state: WatchState | None = None


class ApproveGate(_M):
    """The person's approval of the gate, already redeemed where the token arrived (the API:
    ``durable.approval_for``): ``approval`` is the spent token's sha256, which an activity
    confirms (``Approvals.redeemed``) — never the token, so no token enters a workflow's history.

    ``token`` is what updates carried before: recorded histories replay with it (an activity
    redeemed it then); a new update that carries one is refused by the validators."""

    gate_id: str
    approval: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    token: str | None = Field(default=None, min_length=8, max_length=200)

    @model_validator(mode="after")
    def _one_proof(self) -> ApproveGate:
        if (self.approval is None) == (self.token is None):
            raise ValueError(
                "an approval names exactly one of approval (the spent token's hash) and token "
                "(recorded histories only)"
            )
        return self


class RejectGate(_M):
    """The person's rejection of the gate."""

    gate_id: str
    reason: str | None = Field(default=None, max_length=500)


class Reconfigure(_M):
    """A new polling interval: when to ask, not what. What the watch sends to the provider (the
    window, the consulate) is signed; changing it is a new plan revision, signed and approved
    again, so this signal has no field for it."""

    poll_interval_s: int | None = Field(default=None, ge=1)


class WatchResult(_M):
    """How the watcher ended (``refused``: the policy's gate rules refused one of its writes
    before it was sent — audited ``execute_refused`` / ``policy_refused``, nothing written, a
    hold released)."""

    status: Literal[
        "booked", "rejected", "approval_timeout", "cancelled", "budget_exhausted", "refused"
    ]
    polls: int
    booking_id: str | None = None
    notified: bool = False


class StepCall(_M):
    """An activity's instruction to run one plan step."""

    signed: SignedPlan
    user_id: str
    step: int
    args_override: dict[str, Any] = Field(default_factory=dict)
    choice: Any = None
    gate_id: str | None = None
    choices: dict[str, Any] = Field(default_factory=dict)
    outputs: dict[str, Any] = Field(default_factory=dict)


class RedeemCall(_M):
    """Redeem the person's approval token for a gate (``redeem_gate``, ``require_gate``)."""

    signed: SignedPlan
    user_id: str
    gate_id: str
    token: str


class ConfirmCall(_M):
    """Confirm an approval redeemed where its token arrived (``confirm_gate``): ``approval`` is
    the spent token's sha256."""

    signed: SignedPlan
    user_id: str
    gate_id: str
    approval: str


class RejectCall(_M):
    """Record the person's rejection of a gate (``reject_gate`` activity), with its reason.

    Payloads scheduled before this model existed were a ``RedeemCall`` whose ``token`` held the
    reason: ``token`` is still read as ``reason``, so such an activity runs on a newer worker."""

    signed: SignedPlan
    user_id: str
    gate_id: str
    reason: str = Field(validation_alias=AliasChoices("reason", "token"))


class PlanInput(_M):
    """Run a signed plan's durable steps (no Watcher) as a DAG."""

    signed: SignedPlan
    user_id: str
    approval_timeout_s: int = Field(default=86400, ge=1)
    #: start-to-close timeout of each activity (a lost worker is noticed after this long)
    activity_timeout_s: int = Field(default=60, ge=1, le=3600)


class ResolveStep(_M):
    """A person's word on a write whose outcome is unknown, after looking at the provider.

    ``completed`` (the effect happened; ``result`` is what the provider shows, e.g. the booking
    id) settles the ledger key so the step is answered from it and never sent again; ``failed``
    (it did not happen) lets the step be sent once more under the same idempotency key.
    """

    step: int = Field(ge=1)
    outcome: Literal["completed", "failed"]
    result: dict[str, Any] | None = None
    note: str | None = Field(default=None, max_length=500)


class ReconcileCall(_M):
    """Settle one write's ``unknown`` ledger key (activity input)."""

    call: StepCall
    outcome: Literal["completed", "failed"]
    result: dict[str, Any] | None = None


class FinishCall(_M):
    """How a durable run ended, for the plan's status and the audit log (activity input)."""

    signed: SignedPlan
    user_id: str
    outcome: str = Field(min_length=1, max_length=32)
    workflow_id: str = ""


class DoneWrite(_M):
    """A write that happened (for compensation)."""

    step: int
    result: dict[str, Any]


class CompensateCall(_M):
    """Undo these writes, newest first."""

    signed: SignedPlan
    user_id: str
    done: list[DoneWrite]
    outputs: dict[str, Any] = Field(default_factory=dict)
    choices: dict[str, Any] = Field(default_factory=dict)


class PlanRunResult(_M):
    """How a plan run ended."""

    status: Literal["completed", "rejected", "approval_timeout", "failed"]
    steps: dict[str, str] = Field(default_factory=dict)
    compensated: list[int] = Field(default_factory=list)
    failed_step: int | None = None
    #: why ``failed_step`` failed: its error type (e.g. ``policy_refused``, ``provider_refused``)
    failure: str | None = None
