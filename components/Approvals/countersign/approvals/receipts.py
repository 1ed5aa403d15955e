"""The receipt chain of a plan in ``gate_receipts`` (Approvals SPEC §4; the format is the
Signer's, ``countersign.signer.receipts``).

Every gate decision :class:`~countersign.approvals.Approvals` records (an approval with its
choice hash, a rejection) is signed by a :class:`ReceiptSigner` and appended here **in the
decision's own transaction**, with an audit row ``receipt_signed`` carrying the receipt's hash, so
the chain is anchored in the audit chain and a decision never commits without its receipt.

Invariant: per plan, ``seq`` runs 1, 2, 3, … without a gap and each receipt names the hash of the
one before (null for the first). Appends of one plan are serialized by a transaction-scoped
advisory lock taken *before* any audit row of the transaction (lock order: gate lock → token row
→ decision row → chain lock → audit head), so two decisions on two gates of one plan cannot take
the same ``seq`` nor deadlock.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Protocol, Unpack

from sqlalchemy import Connection, text

from countersign.signer import ReceiptFields

__all__ = ["ReceiptSigner", "SignedReceiptLike", "append_receipt", "read_receipts"]


class SignedReceiptLike(Protocol):
    """A signed receipt as the signer returns it (``countersign.signer.SignedReceipt``)."""

    @property
    def receipt(self) -> Mapping[str, Any]:
        """The receipt document."""
        ...

    @property
    def signature(self) -> Mapping[str, Any]:
        """``{algo, pubkey_id, signature}``."""
        ...

    @property
    def receipt_hash(self) -> str:
        """sha256 hex of the canonical ``{receipt, signature}`` (the next link names it)."""
        ...


class ReceiptSigner(Protocol):
    """Builds and signs the receipt of one decision (``countersign.signer.ReceiptKeySigner``)."""

    def sign_receipt(self, **fields: Unpack[ReceiptFields]) -> SignedReceiptLike:
        """The signed receipt with exactly these fields (their one definition is the Signer's
        ``ReceiptFields``, Signer SPEC §5)."""
        ...


def append_receipt(
    c: Connection,
    signer: ReceiptSigner | None,
    *,
    plan_id: str,
    plan_hash: str,
    gate_id: str,
    user_id: str,
    choice_hash: str,
    decision: str,
    decided_at: datetime,
    token_id: str | None,
) -> dict[str, Any] | None:
    """Sign the next receipt of the plan's chain and store it in ``c``'s transaction.

    Returns the audit entry (``receipt_signed``) the caller appends in the same transaction,
    after its own rows (the chain lock is taken here, before the audit head's); None when no
    signer is configured (nothing is signed).
    """
    if signer is None:
        return None
    c.execute(
        text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 7357002))"),
        {"k": f"receipts:{plan_id}"},
    )
    head = c.execute(
        text(
            "SELECT seq, receipt_hash FROM gate_receipts WHERE plan_id = :p "
            "ORDER BY seq DESC LIMIT 1"
        ),
        {"p": plan_id},
    ).first()
    seq = 1 if head is None else int(head.seq) + 1
    signed = signer.sign_receipt(
        plan_id=plan_id,
        plan_hash=plan_hash,
        gate_id=gate_id,
        user_id=user_id,
        choice_hash=choice_hash,
        decision=decision,
        decided_at=decided_at,
        token_id=token_id,
        previous_receipt_hash=None if head is None else str(head.receipt_hash),
        seq=seq,
    )
    c.execute(_INSERT, _row(signed, plan_id, gate_id, user_id, seq, decided_at))
    return {
        "kind": "receipt_signed",
        "status": "ok",
        "actor": user_id,
        "plan_id": plan_id,
        "op": gate_id,
        "details": {
            "seq": seq,
            "decision": decision,
            "receipt_hash": signed.receipt_hash,
            "pubkey_id": str(signed.signature.get("pubkey_id")),
        },
    }


def read_receipts(c: Connection, plan_id: str) -> list[dict[str, Any]]:
    """The plan's chain in order: ``[{"receipt", "signature"}, …]`` (empty when none)."""
    rows = c.execute(
        text("SELECT receipt, signature FROM gate_receipts WHERE plan_id = :p ORDER BY seq"),
        {"p": plan_id},
    ).all()
    return [{"receipt": r.receipt, "signature": r.signature} for r in rows]


_INSERT = text(
    """
    INSERT INTO gate_receipts (plan_id, seq, gate_id, user_id, receipt, signature, receipt_hash,
                               created_at)
    VALUES (:p, :seq, :g, :u, CAST(:r AS jsonb), CAST(:s AS jsonb), :h, :at)
    """
)


def _row(
    signed: SignedReceiptLike, plan_id: str, gate_id: str, user_id: str, seq: int, at: datetime
) -> dict[str, Any]:
    return {
        "p": plan_id,
        "seq": seq,
        "g": gate_id,
        "u": user_id,
        "r": json.dumps(dict(signed.receipt), ensure_ascii=False),
        "s": json.dumps(dict(signed.signature)),
        "h": signed.receipt_hash,
        "at": at,
    }
