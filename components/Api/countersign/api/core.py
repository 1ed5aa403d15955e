"""Pure functions of the service: a plan's status from its event log, cursors.

No I/O here. A plan's status and every step's status are folded from the plan's events (the rows
the audit chain wrote for it, in order): nothing reports a state the log does not hold.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .errors import BadCursorError

__all__ = [
    "ASKING",
    "TERMINAL",
    "PlanState",
    "decode_cursor",
    "encode_cursor",
    "fold_events",
]

#: event kind → the plan status it moves to (kinds not listed leave the status as it was:
#: refusals, token issues, reconciliations)
_PLAN_STATUS = {
    "plan_signed": "signed",
    "preview_run": "previewed",
    "preview_refused": "preview_refused",
    "gate_waiting": "waiting",
    "gate_approved": "approved",
    "gate_rejected": "rejected",
    "step_started": "running",
    "handed_off": "running",
    "watcher_polled": "watching",
    "plan_cancelled": "cancelled",
}
#: event kind → the step status it moves to
_STEP_STATUS = {
    "step_started": "running",
    "step_finished": "succeeded",
    "step_failed": "failed",
    "step_failed_world_changed": "failed",
    "step_unknown": "unknown",
    "idempotency_unknown": "unknown",
    "step_compensated": "compensated",
}
#: what an ``*_finished`` event's status (an execute's or a durable run's outcome) means for the plan
_ENDS = {
    "completed": "completed",
    "booked": "completed",
    "failed": "failed",
    "budget_exhausted": "failed",
    "unknown": "unknown",
    "rejected": "rejected",
    "approval_timeout": "rejected",
    "cancelled": "cancelled",
    "terminated": "failed",
    "timed_out": "failed",
    "expired": "expired",
    "refused": "refused",
    "waiting": "waiting",
}


@dataclass
class PlanState:
    """What the event log says of one plan."""

    status: str = "unknown"
    steps: dict[int, str] = field(default_factory=dict)
    gates: dict[str, str] = field(default_factory=dict)
    last_seq: int = 0
    updated_at: datetime | None = None
    #: the Temporal workflow the plan was handed to (its ``handed_off`` event), if any
    workflow_id: str | None = None


#: a plan status that nothing changes any more
TERMINAL = frozenset({"completed", "failed", "rejected", "cancelled", "expired", "refused"})
#: a plan status of a cut-short execute whose writes are not all known: ``unknown`` while the
#: reconciler settles it, ``needs_attention`` once it asks the person (finish or undo)
ASKING = frozenset({"unknown", "needs_attention"})


def fold_events(events: Iterable[Mapping[str, Any]]) -> PlanState:
    """Fold a plan's events (oldest first) into its status, step statuses and gate decisions.

    The plan's status is one of ``signed``, ``previewed``, ``preview_refused``, ``approved``,
    ``waiting``, ``running``, ``watching``, ``stale``, ``unknown`` (an execute ended with a write
    whose outcome is not known yet: the reconciler is settling it), ``needs_attention`` (the
    reconciler could not settle it: the settlement offers finish or undo), or one of ``TERMINAL``.

    A gate is ``open`` until decided; ``approved`` once a token for it was redeemed; ``passed``
    once the execute that spent it ran its writes (completed, or moved on to the next gate);
    ``spent`` when that execute failed or the plan ended otherwise (cancelled, expired); back to ``open`` when the world moved before its writes
    (the approval was spent and a new one is needed); ``closed`` when the plan ended without it
    being decided (cancelled, expired, rejected elsewhere)."""
    state = PlanState()
    for e in events:
        kind, status = str(e["kind"]), str(e.get("status") or "")
        state.last_seq = int(e["seq"])
        state.updated_at = e.get("ts")
        if kind in _PLAN_STATUS:
            state.status = _PLAN_STATUS[kind]
        if kind == "execute_refused" and status == "stale":
            state.status = "stale"  # the world moved since the preview: look and approve again
            _gates(state, "approved", "open")
        if kind.endswith("_finished") and kind != "step_finished" and status in _ENDS:
            state.status = _ended(_ENDS[status], e.get("details"))
            _gates_after(state, state.status)
        if kind == "plan_cancelled":
            _gates_after(state, "cancelled")
        if kind == "preview_run":
            _previewed(state, e.get("details"))
        if kind == "handed_off":
            _handed_off(state, e)
        step = e.get("step")
        if step is not None and kind in _STEP_STATUS:
            failed = kind == "step_compensated" and status != "ok"
            state.steps[int(step)] = "compensation_failed" if failed else _STEP_STATUS[kind]
        gate = e.get("op")
        if kind in _GATE_STATUS and isinstance(gate, str):
            _gate_decided(state, kind, gate)
    return state


def _ended(status: str, details: Any) -> str:
    """The plan status an execute's (or a run's) end gives: ``needs_attention`` for an ``unknown``
    end whose settlement asked a person (``details.needs_attention``: the reconciler could not
    settle a cut-short execute and offers finish or undo), the settlement's own word."""
    asks = isinstance(details, Mapping) and bool(details.get("needs_attention"))
    return "needs_attention" if status == "unknown" and asks else status


#: a gate event → the gate's state it records (``gate_waiting`` only for an undecided gate)
_GATE_STATUS = {"gate_approved": "approved", "gate_rejected": "rejected", "gate_waiting": "waiting"}


def _gate_decided(state: PlanState, kind: str, gate: str) -> None:
    if kind == "gate_waiting":
        state.gates.setdefault(gate, "waiting")
    else:
        state.gates[gate] = _GATE_STATUS[kind]


def _handed_off(state: PlanState, event: Mapping[str, Any]) -> None:
    """The run a plan was handed to, from the full event (``details``) or the compact one."""
    details = event.get("details")
    wid = event.get("workflow_id") or (
        details.get("workflow_id") if isinstance(details, Mapping) else None
    )
    state.workflow_id = str(wid) if wid else state.workflow_id


def _gates(state: PlanState, old: str, new: str) -> None:
    for g, v in list(state.gates.items()):
        if v == old:
            state.gates[g] = new


def _gates_after(state: PlanState, outcome: str) -> None:
    """What an execute's (or a run's) end means for the gates decided so far."""
    if outcome in ("completed", "waiting"):
        _gates(state, "approved", "passed")
    elif outcome in TERMINAL:  # failed, cancelled, rejected, expired, refused
        _gates(state, "approved", "spent")
    if outcome in TERMINAL:
        _gates(state, "open", "closed")
        _gates(state, "waiting", "closed")


def _previewed(state: PlanState, details: Any) -> None:
    """The reads a preview ran succeeded (the event names them)."""
    steps = details.get("steps") if isinstance(details, Mapping) else None
    for n in steps if isinstance(steps, list) else []:
        if isinstance(n, int):
            state.steps.setdefault(n, "succeeded")


def encode_cursor(created_at: datetime, plan_id: str) -> str:
    """An opaque cursor for keyset pagination over (created_at DESC, plan_id DESC)."""
    raw = f"{created_at.isoformat()}|{plan_id}".encode()
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """The position a cursor names; a clear ``InputError`` for anything else."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        when, plan_id = raw.split("|", 1)
        return datetime.fromisoformat(when), plan_id
    except (ValueError, binascii.Error, UnicodeDecodeError) as e:
        raise BadCursorError(f"cursor {cursor[:40]!r} is not one this API issued") from e
