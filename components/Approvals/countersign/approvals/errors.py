"""Approval errors: one per way a token can fail to prove an approval (each audited)."""

from __future__ import annotations

from countersign.kernel import CountersignError

__all__ = [
    "ApprovalError",
    "GateApprovedError",
    "GateDecidedError",
    "GateRejectedError",
    "TokenChoiceMismatchError",
    "TokenExpiredError",
    "TokenGateMismatchError",
    "TokenPlanMismatchError",
    "TokenReusedError",
    "TokenScopeError",
    "TokenUnknownError",
    "TokenUserMismatchError",
]


class ApprovalError(CountersignError):
    """A gate approval could not be given or proven."""

    code = "approval_error"


class TokenUnknownError(ApprovalError):
    """No such token was ever issued."""

    code = "token_unknown"


class TokenPlanMismatchError(ApprovalError):
    """The token approves another plan (another plan hash)."""

    code = "token_wrong_plan"


class TokenGateMismatchError(ApprovalError):
    """The token approves another gate of the plan."""

    code = "token_wrong_gate"


class TokenUserMismatchError(ApprovalError):
    """The token was issued to another user."""

    code = "token_wrong_user"


class TokenExpiredError(ApprovalError):
    """The token's time ran out."""

    code = "token_expired"


class TokenReusedError(ApprovalError):
    """The token was already used (single use)."""

    code = "token_reused"


class TokenScopeError(ApprovalError):
    """The token lacks a scope the write needs."""

    code = "token_missing_scope"


class GateDecidedError(ApprovalError):
    """The gate already has the one decision it can have; this call would contradict it."""

    code = "gate_already_decided"


class GateRejectedError(GateDecidedError):
    """The gate was rejected: no token for it is issued or redeemed, and it is not rejected twice."""

    code = "gate_rejected"


class GateApprovedError(GateDecidedError):
    """The gate was approved (a token for it was redeemed): it can no longer be rejected."""

    code = "gate_already_approved"


class TokenChoiceMismatchError(ApprovalError):
    """The stored choice no longer has the hash stored with it (the row was changed after the
    approval): the token is not spent and the gate is not approved."""

    code = "token_choice_mismatch"
