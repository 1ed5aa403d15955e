"""Approvals: single-use, short-lived gate tokens bound to plan hash, gate, user and choice hash;
every decision signed into the plan's receipt chain."""

from .errors import (
    ApprovalError,
    GateApprovedError,
    GateDecidedError,
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
from .receipts import ReceiptSigner, SignedReceiptLike
from .store import NULL_CHOICE_HASH, Approvals, GateDecision, Redemption, token_hash

__all__ = [
    "NULL_CHOICE_HASH",
    "ApprovalError",
    "Approvals",
    "GateApprovedError",
    "GateDecidedError",
    "GateDecision",
    "GateRejectedError",
    "ReceiptSigner",
    "Redemption",
    "SignedReceiptLike",
    "TokenChoiceMismatchError",
    "TokenExpiredError",
    "TokenGateMismatchError",
    "TokenPlanMismatchError",
    "TokenReusedError",
    "TokenScopeError",
    "TokenUnknownError",
    "TokenUserMismatchError",
    "token_hash",
]
