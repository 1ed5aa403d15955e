"""The ledger both token operations share: the values a decision returns, the statements on
``approval_tokens`` and ``gate_decisions``, the gate lock, and the recording of one decision with
its signed receipt (Approvals SPEC §2–§4; the protocol is drawn in ``store.py``).

Lock order, whoever takes them: gate lock → token row → decision row → chain lock → audit head
(LLD), so issue, redeem and reject of one gate never deadlock.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text

from countersign.kernel import ContractError, content_hash
from countersign.storage import AuditSink

from .receipts import ReceiptSigner, append_receipt

__all__ = [
    "INSERT_REJECTION",
    "INSERT_TOKEN",
    "NULL_CHOICE_HASH",
    "REDEEM",
    "GateDecision",
    "GateKey",
    "Redemption",
    "decision_row",
    "hash_of",
    "lock_gate",
    "record_decision",
    "refusal_row",
    "token_hash",
]


def token_hash(token: str) -> str:
    """sha256 hex of a token (what the ledger stores)."""
    return hashlib.sha256(token.encode()).hexdigest()


#: the choice hash of no choice (a rejection; an approval without a choice)
NULL_CHOICE_HASH = content_hash(None)


@dataclass(frozen=True)
class Redemption:
    """A redeemed token: the gate is approved, with the person's choice and its hash."""

    plan_id: str
    gate_id: str
    user_id: str
    choice: Any
    #: sha256 hex of the choice's RFC 8785 bytes (checked against the stored choice)
    choice_hash: str


@dataclass(frozen=True)
class GateDecision:
    """What was decided at a gate."""

    plan_id: str
    gate_id: str
    user_id: str
    decision: str
    choice: Any
    reason: str | None
    #: sha256 hex of the choice's RFC 8785 bytes (``null`` hashed for a rejection)
    choice_hash: str


@dataclass(frozen=True)
class GateKey:
    """The binding every operation names: one plan (and its hash), one gate, one person."""

    plan_id: str
    plan_hash: str
    gate_id: str
    user_id: str


# Spend the token and claim the gate's decision in one statement (``store.py``). ``won`` is
# false only when the decision row is (or, after waiting for its writer, became) ``rejected``.
REDEEM = text(
    """
    WITH t AS (
      UPDATE approval_tokens SET consumed_at = :now
      WHERE token_hash = :h AND consumed_at IS NULL AND expires_at > :now
        AND plan_hash = :ph AND gate_id = :g AND user_id = :u
        AND scopes @> CAST(:need AS jsonb)
        AND NOT EXISTS (SELECT 1 FROM gate_decisions d WHERE d.plan_id = approval_tokens.plan_id
                        AND d.gate_id = approval_tokens.gate_id AND d.decision = 'rejected')
      RETURNING plan_id, choice, choice_hash),
    d AS (
      INSERT INTO gate_decisions (plan_id, gate_id, plan_hash, user_id, decision, choice, decided_at,
                                  choice_hash)
      SELECT t.plan_id, :g, :ph, :u, 'approved', t.choice, :now, t.choice_hash FROM t
      ON CONFLICT (plan_id, gate_id) DO UPDATE SET choice = EXCLUDED.choice,
        choice_hash = EXCLUDED.choice_hash, decided_at = EXCLUDED.decided_at
        WHERE gate_decisions.decision = 'approved'
      RETURNING plan_id)
    SELECT t.plan_id, t.choice, t.choice_hash, EXISTS (SELECT 1 FROM d) AS won FROM t
    """
)


INSERT_TOKEN = text(
    """
    INSERT INTO approval_tokens (token_hash, plan_id, plan_hash, gate_id, user_id, scopes, choice,
                                 choice_hash, issued_at, expires_at)
    VALUES (:h, :p, :ph, :g, :u, CAST(:sc AS jsonb), CAST(:ch AS jsonb), :chh, :now, :exp)
    RETURNING choice
    """
)


# A rejection is final: it never overwrites a decision (``store.py``).
INSERT_REJECTION = text(
    """
    INSERT INTO gate_decisions (plan_id, gate_id, plan_hash, user_id, decision, reason, decided_at,
                                choice_hash)
    VALUES (:p, :g, :ph, :u, 'rejected', :r, :now, :chh)
    ON CONFLICT (plan_id, gate_id) DO NOTHING RETURNING plan_id
    """
)


def hash_of(choice: Any) -> str | None:
    """The choice's hash as read back, or None when canonical JSON cannot carry it."""
    try:
        return content_hash(choice)
    except ContractError:
        return None


def decision_row(c: Connection, plan_id: str, gate_id: str) -> Any:
    """The gate's ``gate_decisions`` row, or None while it is open."""
    return c.execute(
        text("SELECT * FROM gate_decisions WHERE plan_id = :p AND gate_id = :g"),
        {"p": plan_id, "g": gate_id},
    ).first()


def lock_gate(c: Connection, plan_id: str, gate_id: str) -> None:
    """Serialize ``issue`` and ``reject`` of one gate until this transaction ends, so an issue
    either commits before the rejection (its token then never redeems) or sees it."""
    c.execute(
        text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 7357002))"),
        {"k": f"gate:{plan_id}:{gate_id}"},
    )


def record_decision(
    c: Connection,
    audit: AuditSink,
    receipts: ReceiptSigner | None,
    key: GateKey,
    entry: dict[str, Any],
    *,
    choice_hash: str,
    decision: str,
    decided_at: datetime,
    token_id: str | None,
) -> None:
    """Sign the decision's receipt into the plan's chain, then audit ``entry`` and the receipt
    (SPEC §4: in the decision's transaction, in this order)."""
    receipt = append_receipt(
        c,
        receipts,
        plan_id=key.plan_id,
        plan_hash=key.plan_hash,
        gate_id=key.gate_id,
        user_id=key.user_id,
        choice_hash=choice_hash,
        decision=decision,
        decided_at=decided_at,
        token_id=token_id,
    )
    audit.append(c, entry)
    if receipt is not None:
        audit.append(c, receipt)


def refusal_row(kind: str, key: GateKey, actor: str, code: str) -> dict[str, Any]:
    """The audit entry of a refused operation at ``key``'s gate (SPEC §2: each refusal audited,
    its code as the reason)."""
    return {
        "kind": kind,
        "status": "refused",
        "actor": actor,
        "plan_id": key.plan_id,
        "op": key.gate_id,
        "reason": code,
    }
