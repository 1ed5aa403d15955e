"""Rejecting a gate (Approvals SPEC §2–§3): under the gate lock, record ``rejected`` once with its
signed receipt; a gate already decided is refused (``GateApprovedError`` / ``GateRejectedError``)
and the refusal audited in the same transaction."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection

from countersign.storage import AuditSink

from .errors import ApprovalError, GateApprovedError, GateRejectedError
from .ledger import (
    INSERT_REJECTION,
    NULL_CHOICE_HASH,
    GateKey,
    decision_row,
    lock_gate,
    record_decision,
    refusal_row,
)
from .receipts import ReceiptSigner

__all__ = ["reject_in"]


def reject_in(
    c: Connection,
    audit: AuditSink,
    receipts: ReceiptSigner | None,
    key: GateKey,
    *,
    reason: str | None,
    now: datetime,
) -> ApprovalError | None:
    """Record the rejection (None), or audit and return the refusal, which the caller raises
    once the transaction has committed."""
    lock_gate(c, key.plan_id, key.gate_id)
    done = c.execute(
        INSERT_REJECTION,
        {
            "p": key.plan_id,
            "g": key.gate_id,
            "ph": key.plan_hash,
            "u": key.user_id,
            "r": (reason or "")[:500] or None,
            "now": now,
            "chh": NULL_CHOICE_HASH,
        },
    ).first()
    if done is not None:
        rejected = {
            "kind": "gate_rejected",
            "status": "rejected",
            "actor": key.user_id,
            "plan_id": key.plan_id,
            "op": key.gate_id,
            "reason": (reason or None) and reason[:500],
        }
        record_decision(
            c,
            audit,
            receipts,
            key,
            rejected,
            choice_hash=NULL_CHOICE_HASH,
            decision="rejected",
            decided_at=now,
            token_id=None,
        )
        return None
    refusal = _already_decided(c, key)
    audit.append(c, refusal_row("gate_reject_refused", key, key.user_id, refusal.code))
    return refusal


def _already_decided(c: Connection, key: GateKey) -> ApprovalError:
    """The refusal naming the decision already recorded at the gate."""
    # The row exists and is committed (ON CONFLICT waited for any writer of it).
    decided = decision_row(c, key.plan_id, key.gate_id)
    if decided is None:  # pragma: no cover - rows are never deleted
        raise ApprovalError(f"reject {key.gate_id} of plan {key.plan_id}: decision row vanished")
    found = f"{decided.decision} by {decided.user_id} at {decided.decided_at.isoformat()}"
    if decided.decision == "approved":
        return GateApprovedError(
            f"reject {key.gate_id} of plan {key.plan_id}: expected an open gate, found it "
            f"{found} (a token was redeemed; its writes may have run)"
        )
    return GateRejectedError(
        f"reject {key.gate_id} of plan {key.plan_id}: expected an open gate, found it {found}"
    )
