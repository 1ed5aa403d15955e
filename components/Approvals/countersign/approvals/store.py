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

import re
import secrets
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text

from countersign.audit import AuditLog
from countersign.kernel import ApprovalToken, InputError, Policy, content_hash
from countersign.storage import AuditSink, Database

from .errors import ApprovalError, TokenChoiceMismatchError
from .issuing import TokenDraft, check_storable, check_ttl, expiry, issue_in
from .ledger import NULL_CHOICE_HASH, GateDecision, GateKey, Redemption, decision_row, token_hash
from .receipts import ReceiptSigner, read_receipts
from .redeeming import confirm_in, refused, spend_in
from .rejecting import reject_in

__all__ = ["NULL_CHOICE_HASH", "Approvals", "GateDecision", "Redemption", "token_hash"]

_GATE = re.compile(r"^gate-[A-Z]{1,3}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


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
        plan's chain in the same transaction (``issuing.py``).

        Raises:
            InputError: malformed ids, ``ttl_s`` over the policy, a plan already expired, or a
                choice that canonical JSON cannot carry exactly (before any SQL), or one that
                would not read back from the database as given.
            GateRejectedError: the gate was rejected (audited as ``token_issue_refused``).
        """
        self._check(plan_id, plan_hash, gate_id, user_id)
        check_ttl(ttl_s, self.max_ttl_s)
        token = "cst_" + secrets.token_urlsafe(32)
        now = self._clock()
        exp = expiry(now, ttl_s, not_after, plan_id)
        choice_hash = content_hash(choice)
        check_storable(choice, gate_id)
        th = token_hash(token)
        key = GateKey(plan_id, plan_hash, gate_id, user_id)
        with self.db.tx() as c:
            draft = TokenDraft(th, sorted(set(scopes)), choice, choice_hash, now, exp, ttl_s)
            refusal = issue_in(c, self._audit, self.receipts, key, draft)
            if refusal is None:
                return ApprovalToken(
                    token=token,
                    plan_hash=plan_hash,
                    gate_id=gate_id,
                    user_id=user_id,
                    exp=exp,
                    scopes=sorted(set(scopes)),
                )
        raise refusal

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
        """Spend a token on exactly this plan hash, gate and user; the gate is then approved
        (``redeeming.py``).

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
        key = GateKey(plan_id, plan_hash, gate_id, user_id)
        try:
            now = self._clock()
            with self.db.tx() as c:
                outcome = spend_in(
                    c, self._audit, key, th, required_scopes=required_scopes, who=who, now=now
                )
        except TokenChoiceMismatchError as e:
            with self.db.tx() as c:  # the spend and the decision were rolled back with the tx
                self._audit.append(c, refused(who, key, e.code, th))
            raise
        if isinstance(outcome, ApprovalError):
            raise outcome
        return outcome

    def redeemed(
        self,
        ref: str,
        *,
        plan_id: str,
        plan_hash: str,
        gate_id: str,
        user_id: str,
        actor: str | None = None,
    ) -> Redemption:
        """The approval a token redeemed where it arrived (the API spends it before it tells the
        running workflow), named by the token's hash ``ref`` (``token_hash``): all a workflow's
        history holds, never the token. It stands for the approval only while the token was
        issued for exactly this plan hash, gate and user, has been spent, its lifetime has not
        passed, and the gate's decision is this person's approval; the choice stored with that
        token (its hash checked again). Nothing is written but the refusal's audit row.

        Raises:
            TokenUnknownError (no such token, or not spent), TokenPlanMismatchError,
            TokenGateMismatchError, TokenUserMismatchError, TokenExpiredError, GateRejectedError
            (the gate is not this person's approval): audited as ``token_refused``.
            TokenChoiceMismatchError: the stored choice no longer has its hash.
            InputError: malformed ids or a ``ref`` that is not 64 hex characters.
        """
        self._check(plan_id, plan_hash, gate_id, user_id)
        if not isinstance(ref, str) or not _HEX64.match(ref):
            raise InputError("an approval reference is the token's sha256: 64 hex characters")
        key = GateKey(plan_id, plan_hash, gate_id, user_id)
        now = self._clock()
        with self.db.tx() as c:
            outcome = confirm_in(c, self._audit, key, ref, who=actor or user_id, now=now)
        if isinstance(outcome, ApprovalError):
            raise outcome
        return outcome

    def reject(
        self, *, plan_id: str, plan_hash: str, gate_id: str, user_id: str, reason: str | None = None
    ) -> None:
        """The person rejected this gate: it stays rejected; its tokens never redeem
        (``rejecting.py``).

        Raises:
            GateApprovedError: a token for the gate was already redeemed (the gate is approved).
            GateRejectedError: the gate was already rejected.
            Both are audited as ``gate_reject_refused``.
        """
        self._check(plan_id, plan_hash, gate_id, user_id)
        now = self._clock()
        key = GateKey(plan_id, plan_hash, gate_id, user_id)
        with self.db.tx() as c:
            refusal = reject_in(c, self._audit, self.receipts, key, reason=reason, now=now)
        if refusal is not None:
            raise refusal

    def offered_choice(
        self, token: str, *, plan_id: str, gate_id: str, conn: Connection | None = None
    ) -> tuple[bool, Any]:
        """``(found, choice)``: the choice stored with ``token`` if it is an unspent token for
        this plan's gate, so a caller can check the choice before spending the token (a refused
        choice then leaves the token and the gate's decision as they were). Nothing is audited:
        ``redeem`` refuses and audits whatever is wrong with the token itself (another gate,
        another plan, spent, unknown). ``conn``: inside the caller's open transaction (the
        executor reads it with the plan)."""
        if not isinstance(token, str) or not 8 <= len(token) <= 200:
            return False, None
        sql = text(
            "SELECT choice FROM approval_tokens WHERE token_hash = :h "
            "AND consumed_at IS NULL AND plan_id = :p AND gate_id = :g"
        )
        params = {"h": token_hash(token), "p": plan_id, "g": gate_id}
        if conn is not None:
            row = conn.execute(sql, params).first()
        else:
            with self.db.tx() as c:
                row = c.execute(sql, params).first()
        return (False, None) if row is None else (True, row.choice)

    def decision(self, plan_id: str, gate_id: str) -> GateDecision | None:
        """The recorded decision at a gate, if any."""
        with self.db.tx() as c:
            r = decision_row(c, plan_id, gate_id)
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
