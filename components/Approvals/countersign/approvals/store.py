"""Approvals: gate tokens bound to {plan_hash, gate_id, user_id, scopes}, short-lived, single use.

Token format (Approvals SPEC §1): an opaque random string ``cst_<43 base64url chars>`` (256 bits
from ``secrets``). Only its sha256 is stored, so a copy of the database does not hold live tokens;
audit rows carry the first 12 hex of that hash.

A gate has at most one decision, ``approved`` or ``rejected``: one ``gate_decisions`` row per
(plan, gate), whose primary key is the arbiter (SPEC §3). Redemption is one statement that spends
the token *and* claims the decision::

    WITH t AS (UPDATE approval_tokens SET consumed_at = :now
               WHERE token_hash = :h AND consumed_at IS NULL AND expires_at > :now
                 AND plan_hash = :ph AND gate_id = :g AND user_id = :u AND scopes @> :needed …
               RETURNING …),
         d AS (INSERT INTO gate_decisions … 'approved' FROM t
               ON CONFLICT (plan_id, gate_id) DO UPDATE … WHERE gate_decisions.decision = 'approved'
               RETURNING …)
    SELECT …

so of any number of concurrent redemptions exactly one spends a token, and a redemption racing a
``reject`` either claims the row first (the reject is refused: ``GateApprovedError``) or finds it
rejected (the token is put back unspent and the redemption is refused: ``GateRejectedError``) —
never both. A rejected row is never changed, so after a reject no token for that gate redeems.
``issue`` and ``reject`` take a per-gate transaction lock, so a token is never issued for a gate
whose rejection has committed. Every refusal is named and audited in the same transaction.

The choice is bound by its hash (SPEC §2): ``issue`` stores ``choice_hash = content_hash(choice)``
(RFC 8785 bytes, sha256; a null choice hashes ``null``) with the token; redemption hashes the
stored choice again and refuses a row whose choice no longer has its hash
(``TokenChoiceMismatchError``: the statement's work is rolled back, the refusal audited).

With a ``receipts=`` signer, every decision — ``issue`` (an approval, with its choice hash) and
``reject`` — appends a signed receipt to the plan's chain in the same transaction
(``receipts.py``, SPEC §4).
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, text

from countersign.audit import AuditLog
from countersign.kernel import ApprovalToken, ContractError, InputError, Policy, content_hash
from countersign.storage import AuditSink, Database

from .errors import (
    ApprovalError,
    GateApprovedError,
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
from .receipts import ReceiptSigner, append_receipt, read_receipts

__all__ = ["NULL_CHOICE_HASH", "Approvals", "GateDecision", "Redemption", "token_hash"]

_GATE = re.compile(r"^gate-[A-Z]{1,3}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def token_hash(token: str) -> str:
    """sha256 hex of a token (what the ledger stores)."""
    return hashlib.sha256(token.encode()).hexdigest()


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


class Approvals:
    """Issue, redeem and reject gate approvals."""

    def __init__(
        self,
        db: Database,
        *,
        clock: Callable[[], datetime],
        audit: AuditSink | None = None,
        max_ttl_s: int | None = None,
        receipts: ReceiptSigner | None = None,
    ) -> None:
        self.db = db
        self._clock = clock
        self._audit: AuditSink = audit or AuditLog(clock=clock)
        #: signs each decision's receipt (SPEC §4); None = no receipts (tests, tools)
        self.receipts = receipts
        #: the Policy's ``approval_ttl_s``: no token lives longer (default: the default Policy's)
        self.max_ttl_s = max_ttl_s if max_ttl_s is not None else Policy().approval_ttl_s

    @staticmethod
    def _check(plan_id: str, plan_hash: str, gate_id: str, user_id: str) -> None:
        if not plan_id or len(plan_id) != 26:
            raise InputError(f"plan_id {plan_id!r} is not a ULID")
        if not _HEX64.match(plan_hash):
            raise InputError("plan_hash must be 64 lower-case hex characters")
        if not _GATE.match(gate_id):
            raise InputError(f"gate_id {gate_id!r} must look like gate-A")
        if not user_id or len(user_id) > 128:
            raise InputError("user_id must be 1..128 characters")

    def issue(
        self,
        *,
        plan_id: str,
        plan_hash: str,
        gate_id: str,
        user_id: str,
        scopes: Sequence[str],
        ttl_s: int,
        choice: Any = None,
        not_after: datetime | None = None,
    ) -> ApprovalToken:
        """The person approved this gate (with an optional choice): a token to execute with.

        The token expires after ``ttl_s``, at most the Policy's ``approval_ttl_s``, and never
        after ``not_after`` (the plan's own expiry, when the caller knows it). The choice's hash
        is stored with it; with a receipt signer the approval's signed receipt is appended to the
        plan's chain in the same transaction.

        Raises:
            InputError: malformed ids, ``ttl_s`` over the policy, a plan already expired, or a
                choice that canonical JSON cannot carry exactly (before any SQL), or one that
                would not read back from the database as given.
            GateRejectedError: the gate was rejected (audited as ``token_issue_refused``).
        """
        self._check(plan_id, plan_hash, gate_id, user_id)
        if not 1 <= ttl_s <= 86400:
            raise InputError(f"approval ttl_s {ttl_s} must be between 1 and 86400 seconds")
        if ttl_s > self.max_ttl_s:
            raise InputError(
                f"approval ttl_s {ttl_s} exceeds the policy's approval_ttl_s {self.max_ttl_s}"
            )
        token = "cst_" + secrets.token_urlsafe(32)
        now = self._clock()
        exp = now + timedelta(seconds=ttl_s)
        if not_after is not None:
            if not_after <= now:
                raise InputError(
                    f"plan {plan_id} expired at {not_after.isoformat()}: no approval can be "
                    "issued for it; plan again"
                )
            exp = min(exp, not_after)
        choice_hash = content_hash(choice)
        if "\\u0000" in json.dumps(choice):  # PostgreSQL's jsonb cannot hold NUL, key or value
            raise InputError(
                f"the choice for {gate_id} holds a NUL character, which the database cannot "
                "store: approve with another choice"
            )
        th = token_hash(token)
        with self.db.tx() as c:
            _lock_gate(c, plan_id, gate_id)
            decided = _decision_row(c, plan_id, gate_id)
            if decided is not None and decided.decision == "rejected":
                refusal: ApprovalError = GateRejectedError(
                    f"issue a token for {gate_id} of plan {plan_id}: expected an open gate, found "
                    f"it rejected by {decided.user_id} at {decided.decided_at.isoformat()}"
                )
                self._audit.append(
                    c,
                    {
                        "kind": "token_issue_refused",
                        "status": "refused",
                        "actor": user_id,
                        "plan_id": plan_id,
                        "op": gate_id,
                        "reason": refusal.code,
                    },
                )
            else:
                self._store_token(
                    c,
                    th,
                    plan_id=plan_id,
                    plan_hash=plan_hash,
                    gate_id=gate_id,
                    user_id=user_id,
                    scopes=sorted(set(scopes)),
                    choice=choice,
                    choice_hash=choice_hash,
                    now=now,
                    exp=exp,
                    ttl_s=ttl_s,
                )
                return ApprovalToken(
                    token=token,
                    plan_hash=plan_hash,
                    gate_id=gate_id,
                    user_id=user_id,
                    exp=exp,
                    scopes=sorted(set(scopes)),
                )
        raise refusal

    def _store_token(
        self,
        c: Connection,
        th: str,
        *,
        plan_id: str,
        plan_hash: str,
        gate_id: str,
        user_id: str,
        scopes: list[str],
        choice: Any,
        choice_hash: str,
        now: datetime,
        exp: datetime,
        ttl_s: int,
    ) -> None:
        """Insert the token with its choice and choice hash, sign the approval's receipt, audit."""
        back = c.execute(
            _INSERT_TOKEN,
            {
                "h": th,
                "p": plan_id,
                "ph": plan_hash,
                "g": gate_id,
                "u": user_id,
                "sc": json.dumps(scopes),
                "ch": json.dumps(choice),
                "chh": choice_hash,
                "now": now,
                "exp": exp,
            },
        ).scalar_one()
        if _hash_of(back) != choice_hash:
            raise InputError(
                f"the choice for {gate_id} would not read back from the database as given "
                "(a number beyond 2^53-1 or text with NUL): approve with another choice"
            )
        receipt = append_receipt(
            c,
            self.receipts,
            plan_id=plan_id,
            plan_hash=plan_hash,
            gate_id=gate_id,
            user_id=user_id,
            choice_hash=choice_hash,
            decision="approved",
            decided_at=now,
            token_id=th[:12],
        )
        self._audit.append(
            c,
            {
                "kind": "token_issued",
                "status": "ok",
                "actor": user_id,
                "plan_id": plan_id,
                "op": gate_id,
                "details": {"token_ref": th[:12], "ttl_s": ttl_s, "choice_hash": choice_hash},
            },
        )
        if receipt is not None:
            self._audit.append(c, receipt)

    def redeem(
        self,
        token: str,
        *,
        plan_id: str,
        plan_hash: str,
        gate_id: str,
        user_id: str,
        required_scopes: Sequence[str] = (),
        actor: str | None = None,
    ) -> Redemption:
        """Spend a token on exactly this plan hash, gate and user; the gate is then approved.

        Raises:
            TokenUnknownError, TokenPlanMismatchError, TokenGateMismatchError,
            TokenUserMismatchError, TokenExpiredError, TokenReusedError, TokenScopeError,
            GateRejectedError: refused (and audited as ``token_refused``); the token is not spent.
            TokenChoiceMismatchError: the stored choice no longer has its stored hash (the row
                was changed): the statement's work is rolled back, the refusal audited after it.
        """
        self._check(plan_id, plan_hash, gate_id, user_id)
        if not isinstance(token, str) or not 8 <= len(token) <= 200:
            raise InputError("token must be a string of 8..200 characters")
        th = token_hash(token)
        who = actor or user_id
        try:
            return self._spend(th, plan_id, plan_hash, gate_id, user_id, required_scopes, who)
        except TokenChoiceMismatchError as e:
            with self.db.tx() as c:  # the spend and the decision were rolled back with the tx
                self._audit.append(c, _refused(who, plan_id, gate_id, e.code, th))
            raise

    def _spend(
        self,
        th: str,
        plan_id: str,
        plan_hash: str,
        gate_id: str,
        user_id: str,
        required_scopes: Sequence[str],
        who: str,
    ) -> Redemption:
        """The one redemption statement, its check of the choice hash, and its audit rows."""
        now = self._clock()
        refusal: ApprovalError
        with self.db.tx() as c:
            row = c.execute(
                _REDEEM,
                {
                    "now": now,
                    "h": th,
                    "ph": plan_hash,
                    "g": gate_id,
                    "u": user_id,
                    "need": json.dumps(sorted(set(required_scopes))),
                },
            ).first()
            if row is not None and row.won:
                _check_choice(row, gate_id)
                self._audit.append(
                    c,
                    {
                        "kind": "gate_approved",
                        "status": "ok",
                        "actor": who,
                        "plan_id": row.plan_id,
                        "op": gate_id,
                        "details": {"token_ref": th[:12], "choice_hash": row.choice_hash},
                    },
                )
                return Redemption(
                    plan_id=row.plan_id,
                    gate_id=gate_id,
                    user_id=user_id,
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
            refusal = self._diagnose(
                c,
                th,
                now,
                plan_hash=plan_hash,
                gate_id=gate_id,
                user_id=user_id,
                required=required_scopes,
            )
            self._audit.append(c, _refused(who, plan_id, gate_id, refusal.code, th))
        raise refusal

    def _diagnose(
        self,
        c: Connection,
        th: str,
        now: datetime,
        *,
        plan_hash: str,
        gate_id: str,
        user_id: str,
        required: Sequence[str],
    ) -> ApprovalError:
        t = c.execute(
            text("SELECT * FROM approval_tokens WHERE token_hash = :h"), {"h": th}
        ).first()
        if t is None:
            return TokenUnknownError("no such approval token")
        if t.plan_hash != plan_hash:
            return TokenPlanMismatchError(
                f"the token approves another plan (hash {t.plan_hash[:12]}…), not {plan_hash[:12]}…"
            )
        if t.gate_id != gate_id:
            return TokenGateMismatchError(f"the token approves {t.gate_id}, not {gate_id}")
        if t.user_id != user_id:
            return TokenUserMismatchError("the token was issued to another user")
        if t.consumed_at is not None:
            return TokenReusedError(f"the token for {gate_id} was already used")
        decided = _decision_row(c, t.plan_id, gate_id)
        if decided is not None and decided.decision == "rejected":
            return GateRejectedError(
                f"redeem a token for {gate_id} of plan {t.plan_id}: expected an open gate, found "
                f"it rejected by {decided.user_id} at {decided.decided_at.isoformat()}; "
                "the token was not spent"
            )
        if t.expires_at <= now:
            return TokenExpiredError(
                f"the token for {gate_id} expired at {t.expires_at.isoformat()}"
            )
        missing = sorted(set(required) - set(t.scopes))
        return TokenScopeError(f"the token for {gate_id} lacks scope(s) {missing}")

    def reject(
        self, *, plan_id: str, plan_hash: str, gate_id: str, user_id: str, reason: str | None = None
    ) -> None:
        """The person rejected this gate: it stays rejected; its tokens never redeem.

        Raises:
            GateApprovedError: a token for the gate was already redeemed (the gate is approved).
            GateRejectedError: the gate was already rejected.
            Both are audited as ``gate_reject_refused``.
        """
        self._check(plan_id, plan_hash, gate_id, user_id)
        now = self._clock()
        with self.db.tx() as c:
            _lock_gate(c, plan_id, gate_id)
            done = c.execute(
                text(
                    """
                    INSERT INTO gate_decisions (plan_id, gate_id, plan_hash, user_id, decision, reason, decided_at,
                                                choice_hash)
                    VALUES (:p, :g, :ph, :u, 'rejected', :r, :now, :chh)
                    ON CONFLICT (plan_id, gate_id) DO NOTHING RETURNING plan_id
                    """
                ),
                {
                    "p": plan_id,
                    "g": gate_id,
                    "ph": plan_hash,
                    "u": user_id,
                    "r": (reason or "")[:500] or None,
                    "now": now,
                    "chh": NULL_CHOICE_HASH,
                },
            ).first()
            if done is not None:
                receipt = append_receipt(
                    c,
                    self.receipts,
                    plan_id=plan_id,
                    plan_hash=plan_hash,
                    gate_id=gate_id,
                    user_id=user_id,
                    choice_hash=NULL_CHOICE_HASH,
                    decision="rejected",
                    decided_at=now,
                    token_id=None,
                )
                self._audit.append(
                    c,
                    {
                        "kind": "gate_rejected",
                        "status": "rejected",
                        "actor": user_id,
                        "plan_id": plan_id,
                        "op": gate_id,
                        "reason": (reason or None) and reason[:500],
                    },
                )
                if receipt is not None:
                    self._audit.append(c, receipt)
                return
            # The row exists and is committed (ON CONFLICT waited for any writer of it).
            decided = _decision_row(c, plan_id, gate_id)
            if decided is None:  # pragma: no cover - rows are never deleted
                raise ApprovalError(f"reject {gate_id} of plan {plan_id}: decision row vanished")
            found = f"{decided.decision} by {decided.user_id} at {decided.decided_at.isoformat()}"
            refusal: ApprovalError = (
                GateApprovedError(
                    f"reject {gate_id} of plan {plan_id}: expected an open gate, found it {found} "
                    "(a token was redeemed; its writes may have run)"
                )
                if decided.decision == "approved"
                else GateRejectedError(
                    f"reject {gate_id} of plan {plan_id}: expected an open gate, found it {found}"
                )
            )
            self._audit.append(
                c,
                {
                    "kind": "gate_reject_refused",
                    "status": "refused",
                    "actor": user_id,
                    "plan_id": plan_id,
                    "op": gate_id,
                    "reason": refusal.code,
                },
            )
        raise refusal

    def offered_choice(self, token: str, *, plan_id: str, gate_id: str) -> tuple[bool, Any]:
        """``(found, choice)``: the choice stored with ``token`` if it is an unspent token for
        this plan's gate, so a caller can check the choice before spending the token (a refused
        choice then leaves the token and the gate's decision as they were). Nothing is audited:
        ``redeem`` refuses and audits whatever is wrong with the token itself (another gate,
        another plan, spent, unknown)."""
        if not isinstance(token, str) or not 8 <= len(token) <= 200:
            return False, None
        with self.db.tx() as c:
            row = c.execute(
                text(
                    "SELECT choice FROM approval_tokens WHERE token_hash = :h "
                    "AND consumed_at IS NULL AND plan_id = :p AND gate_id = :g"
                ),
                {"h": token_hash(token), "p": plan_id, "g": gate_id},
            ).first()
        return (False, None) if row is None else (True, row.choice)

    def decision(self, plan_id: str, gate_id: str) -> GateDecision | None:
        """The recorded decision at a gate, if any."""
        with self.db.tx() as c:
            r = _decision_row(c, plan_id, gate_id)
        if r is None:
            return None
        return GateDecision(
            plan_id=r.plan_id,
            gate_id=r.gate_id,
            user_id=r.user_id,
            decision=r.decision,
            choice=r.choice,
            reason=r.reason,
            choice_hash=r.choice_hash,
        )

    def receipt_chain(self, plan_id: str) -> list[dict[str, Any]]:
        """The plan's signed receipts in chain order, ``[{"receipt", "signature"}, …]``."""
        with self.db.tx() as c:
            return read_receipts(c, plan_id)


# Spend the token and claim the gate's decision in one statement (module docstring). ``won`` is
# false only when the decision row is (or, after waiting for its writer, became) ``rejected``.
_REDEEM = text(
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


_INSERT_TOKEN = text(
    """
    INSERT INTO approval_tokens (token_hash, plan_id, plan_hash, gate_id, user_id, scopes, choice,
                                 choice_hash, issued_at, expires_at)
    VALUES (:h, :p, :ph, :g, :u, CAST(:sc AS jsonb), CAST(:ch AS jsonb), :chh, :now, :exp)
    RETURNING choice
    """
)

#: the choice hash of no choice (a rejection; an approval without a choice)
NULL_CHOICE_HASH = content_hash(None)


def _hash_of(choice: Any) -> str | None:
    """The choice's hash as read back, or None when canonical JSON cannot carry it."""
    try:
        return content_hash(choice)
    except ContractError:
        return None


def _check_choice(row: Any, gate_id: str) -> None:
    """The redeemed row's choice must still have the hash stored at ``issue`` (SPEC §2)."""
    found = _hash_of(row.choice)
    if found != row.choice_hash:
        raise TokenChoiceMismatchError(
            f"redeem a token for {gate_id} of plan {row.plan_id}: the stored choice hashes to "
            f"{(found or 'nothing canonical')[:16]}…, the approval stored "
            f"{str(row.choice_hash)[:16]}… (the row was changed after the approval); "
            "the token was not spent"
        )


def _refused(who: str, plan_id: str, gate_id: str, code: str, th: str) -> dict[str, Any]:
    return {
        "kind": "token_refused",
        "status": "refused",
        "actor": who,
        "plan_id": plan_id,
        "op": gate_id,
        "reason": code,
        "details": {"token_ref": th[:12]},
    }


def _decision_row(c: Connection, plan_id: str, gate_id: str) -> Any:
    return c.execute(
        text("SELECT * FROM gate_decisions WHERE plan_id = :p AND gate_id = :g"),
        {"p": plan_id, "g": gate_id},
    ).first()


def _lock_gate(c: Connection, plan_id: str, gate_id: str) -> None:
    """Serialize ``issue`` and ``reject`` of one gate until this transaction ends, so an issue
    either commits before the rejection (its token then never redeems) or sees it."""
    c.execute(
        text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 7357002))"),
        {"k": f"gate:{plan_id}:{gate_id}"},
    )
