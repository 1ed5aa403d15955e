"""Redeeming a gate token (Approvals SPEC §2–§3): the one statement that spends the token and
claims the gate's decision, its check of the choice hash, and — when it matches nothing — the
named refusal, read in a fixed order so a holder of someone else's token learns only the first
mismatch (LLD)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text

from countersign.storage import AuditSink

from .errors import (
    ApprovalError,
    GateRejectedError,
    TokenChoiceMismatchError,
    TokenExpiredError,
    TokenGateMismatchError,
    TokenPlanMismatchError,
    TokenReusedError,
    TokenScopeError,
    TokenUnknownError,
    TokenUserMismatchError,
)
from .ledger import REDEEM, GateKey, Redemption, decision_row, hash_of, refusal_row

__all__ = ["confirm_in", "refused", "spend_in"]


def spend_in(
    c: Connection,
    audit: AuditSink,
    key: GateKey,
    th: str,
    *,
    required_scopes: Sequence[str],
    who: str,
    now: datetime,
) -> Redemption | ApprovalError:
    """The one redemption statement, its check of the choice hash, and its audit rows: the
    redemption, or the refusal (audited) that the caller raises once the transaction commits."""
    row = c.execute(
        REDEEM,
        {
            "now": now,
            "h": th,
            "ph": key.plan_hash,
            "g": key.gate_id,
            "u": key.user_id,
            "need": json.dumps(sorted(set(required_scopes))),
        },
    ).first()
    if row is not None and row.won:
        _check_choice(row, key.gate_id)
        audit.append(
            c,
            {
                "kind": "gate_approved",
                "status": "ok",
                "actor": who,
                "plan_id": row.plan_id,
                "op": key.gate_id,
                "details": {"token_ref": th[:12], "choice_hash": row.choice_hash},
            },
        )
        return Redemption(
            plan_id=row.plan_id,
            gate_id=key.gate_id,
            user_id=key.user_id,
            choice=row.choice,
            choice_hash=row.choice_hash,
        )
    if row is not None:
        # Lost the race to a reject that committed after this statement's snapshot: the
        # decision row says rejected. Put the token back (we hold its row lock; it was
        # unspent), so the refusal leaves it as it was, like every other refusal.
        c.execute(
            text("UPDATE approval_tokens SET consumed_at = NULL WHERE token_hash = :h"),
            {"h": th},
        )
    refusal = _diagnose(c, th, now, key, required_scopes)
    audit.append(c, refused(who, key, refusal.code, th))
    return refusal


def confirm_in(
    c: Connection, audit: AuditSink, key: GateKey, th: str, *, who: str, now: datetime
) -> Redemption | ApprovalError:
    """The approval a token redeemed where it arrived, named by the token's hash ``th`` (SPEC
    §3a): the redemption it made, or the refusal (audited, ``token_refused``) the caller raises."""
    refusal = _unconfirmed(c, th, now, key)
    if refusal is not None:
        audit.append(c, refused(who, key, refusal.code, th))
        return refusal
    t = c.execute(text("SELECT * FROM approval_tokens WHERE token_hash = :h"), {"h": th}).one()
    _check_choice(t, key.gate_id)
    return Redemption(
        plan_id=t.plan_id,
        gate_id=key.gate_id,
        user_id=key.user_id,
        choice=t.choice,
        choice_hash=t.choice_hash,
    )


def _unconfirmed(c: Connection, th: str, now: datetime, key: GateKey) -> ApprovalError | None:
    """Why ``th`` does not stand for an approval of exactly this gate, if it does not: unknown →
    other plan → other gate → other user → not spent (an unspent token's hash proves nothing)
    → past the token's lifetime → the gate's decision is not this person's approval."""
    t = c.execute(text("SELECT * FROM approval_tokens WHERE token_hash = :h"), {"h": th}).first()
    if t is None:
        return TokenUnknownError("no such approval token")
    mismatch = _binding_mismatch(t, key)
    if mismatch is not None:
        return mismatch
    if t.consumed_at is None:
        return TokenUnknownError(
            f"the approval of {key.gate_id} was not redeemed (the token must be spent first)"
        )
    if t.expires_at <= now:
        return TokenExpiredError(
            f"the approval of {key.gate_id} reached the run after its token expired at "
            f"{t.expires_at.isoformat()}"
        )
    decided = decision_row(c, t.plan_id, key.gate_id)
    if decided is None or decided.decision != "approved" or decided.user_id != key.user_id:
        # no user id in the message: a refusal's message is readable in the Temporal UI
        found = "no decision" if decided is None else decided.decision
        if decided is not None and decided.user_id != key.user_id:
            found += " by another person"
        return GateRejectedError(f"{key.gate_id} of plan {t.plan_id} is not approved ({found})")
    return None


def _diagnose(
    c: Connection, th: str, now: datetime, key: GateKey, required: Sequence[str]
) -> ApprovalError:
    """Why the statement matched nothing, in the LLD's order: unknown → other plan → other gate
    → other user → reused → rejected → expired → scope."""
    t = c.execute(text("SELECT * FROM approval_tokens WHERE token_hash = :h"), {"h": th}).first()
    if t is None:
        return TokenUnknownError("no such approval token")
    mismatch = _binding_mismatch(t, key)
    if mismatch is not None:
        return mismatch
    if t.consumed_at is not None:
        return TokenReusedError(f"the token for {key.gate_id} was already used")
    decided = decision_row(c, t.plan_id, key.gate_id)
    if decided is not None and decided.decision == "rejected":
        return GateRejectedError(
            f"redeem a token for {key.gate_id} of plan {t.plan_id}: expected an open gate, found "
            f"it rejected by {decided.user_id} at {decided.decided_at.isoformat()}; "
            "the token was not spent"
        )
    if t.expires_at <= now:
        return TokenExpiredError(
            f"the token for {key.gate_id} expired at {t.expires_at.isoformat()}"
        )
    missing = sorted(set(required) - set(t.scopes))
    return TokenScopeError(f"the token for {key.gate_id} lacks scope(s) {missing}")


def _binding_mismatch(t: Any, key: GateKey) -> ApprovalError | None:
    """The first of plan hash, gate, user that the token was not issued for, if any."""
    if t.plan_hash != key.plan_hash:
        return TokenPlanMismatchError(
            f"the token approves another plan (hash {t.plan_hash[:12]}…), not {key.plan_hash[:12]}…"
        )
    if t.gate_id != key.gate_id:
        return TokenGateMismatchError(f"the token approves {t.gate_id}, not {key.gate_id}")
    if t.user_id != key.user_id:
        return TokenUserMismatchError("the token was issued to another user")
    return None


def _check_choice(row: Any, gate_id: str) -> None:
    """The redeemed row's choice must still have the hash stored at ``issue`` (SPEC §2)."""
    found = hash_of(row.choice)
    if found != row.choice_hash:
        raise TokenChoiceMismatchError(
            f"redeem a token for {gate_id} of plan {row.plan_id}: the stored choice hashes to "
            f"{(found or 'nothing canonical')[:16]}…, the approval stored "
            f"{str(row.choice_hash)[:16]}… (the row was changed after the approval); "
            "the token was not spent"
        )


def refused(who: str, key: GateKey, code: str, th: str) -> dict[str, Any]:
    """The ``token_refused`` audit entry of a refused redemption."""
    return {**refusal_row("token_refused", key, who, code), "details": {"token_ref": th[:12]}}
