"""Issuing a gate token (Approvals SPEC §2): the checks made before any SQL, and the one
transaction that stores the token with its choice hash, signs the approval's receipt and audits it
— or, at a rejected gate, audits the refusal (SPEC §3)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection

from countersign.kernel import InputError
from countersign.storage import AuditSink

from .errors import ApprovalError, GateRejectedError
from .ledger import (
    INSERT_TOKEN,
    GateKey,
    decision_row,
    hash_of,
    lock_gate,
    record_decision,
    refusal_row,
)
from .receipts import ReceiptSigner

__all__ = ["TokenDraft", "check_storable", "check_ttl", "expiry", "issue_in"]


@dataclass(frozen=True)
class TokenDraft:
    """The token row ``issue`` stores: the token's hash, its scopes, choice and times."""

    th: str
    scopes: list[str]
    choice: Any
    choice_hash: str
    now: datetime
    exp: datetime
    ttl_s: int


def check_ttl(ttl_s: int, max_ttl_s: int) -> None:
    """``ttl_s`` within 1..86400 and within the Policy's ``approval_ttl_s``."""
    if not 1 <= ttl_s <= 86400:
        raise InputError(f"approval ttl_s {ttl_s} must be between 1 and 86400 seconds")
    if ttl_s > max_ttl_s:
        raise InputError(f"approval ttl_s {ttl_s} exceeds the policy's approval_ttl_s {max_ttl_s}")


def expiry(now: datetime, ttl_s: int, not_after: datetime | None, plan_id: str) -> datetime:
    """``now + ttl_s``, never after ``not_after`` (the plan's own expiry); none for a plan that
    has already expired."""
    exp = now + timedelta(seconds=ttl_s)
    if not_after is not None:
        if not_after <= now:
            raise InputError(
                f"plan {plan_id} expired at {not_after.isoformat()}: no approval can be "
                "issued for it; plan again"
            )
        exp = min(exp, not_after)
    return exp


def check_storable(choice: Any, gate_id: str) -> None:
    """PostgreSQL's jsonb cannot hold NUL, key or value: refuse it before any SQL."""
    if "\\u0000" in json.dumps(choice):
        raise InputError(
            f"the choice for {gate_id} holds a NUL character, which the database cannot "
            "store: approve with another choice"
        )


def issue_in(
    c: Connection,
    audit: AuditSink,
    receipts: ReceiptSigner | None,
    key: GateKey,
    draft: TokenDraft,
) -> ApprovalError | None:
    """Under the gate lock: store the token, or (the gate is rejected) audit and return the
    refusal, which the caller raises once the transaction has committed."""
    lock_gate(c, key.plan_id, key.gate_id)
    decided = decision_row(c, key.plan_id, key.gate_id)
    if decided is not None and decided.decision == "rejected":
        refusal = GateRejectedError(
            f"issue a token for {key.gate_id} of plan {key.plan_id}: expected an open gate, found "
            f"it rejected by {decided.user_id} at {decided.decided_at.isoformat()}"
        )
        audit.append(c, refusal_row("token_issue_refused", key, key.user_id, refusal.code))
        return refusal
    _store_token(c, audit, receipts, key, draft)
    return None


def _store_token(
    c: Connection,
    audit: AuditSink,
    receipts: ReceiptSigner | None,
    key: GateKey,
    draft: TokenDraft,
) -> None:
    """Insert the token with its choice and choice hash, sign the approval's receipt, audit."""
    back = c.execute(
        INSERT_TOKEN,
        {
            "h": draft.th,
            "p": key.plan_id,
            "ph": key.plan_hash,
            "g": key.gate_id,
            "u": key.user_id,
            "sc": json.dumps(draft.scopes),
            "ch": json.dumps(draft.choice),
            "chh": draft.choice_hash,
            "now": draft.now,
            "exp": draft.exp,
        },
    ).scalar_one()
    if hash_of(back) != draft.choice_hash:
        raise InputError(
            f"the choice for {key.gate_id} would not read back from the database as given "
            "(a number beyond 2^53-1 or text with NUL): approve with another choice"
        )
    issued = {
        "kind": "token_issued",
        "status": "ok",
        "actor": key.user_id,
        "plan_id": key.plan_id,
        "op": key.gate_id,
        "details": {
            "token_ref": draft.th[:12],
            "ttl_s": draft.ttl_s,
            "choice_hash": draft.choice_hash,
        },
    }
    record_decision(
        c,
        audit,
        receipts,
        key,
        issued,
        choice_hash=draft.choice_hash,
        decision="approved",
        decided_at=draft.now,
        token_id=draft.th[:12],
    )
