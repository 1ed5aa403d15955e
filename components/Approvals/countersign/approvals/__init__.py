"""Approvals: single-use, short-lived gate tokens bound to plan hash, gate and user."""

from .errors import (
    ApprovalError,
    GateApprovedError,
    GateDecidedError,
    GateRejectedError,
    TokenExpiredError,
    TokenGateMismatchError,
    TokenPlanMismatchError,
    TokenReusedError,
    TokenScopeError,
    TokenUnknownError,
    TokenUserMismatchError,
)
from .store import Approvals, GateDecision, Redemption, token_hash

__all__ = [
    "ApprovalError",
    "Approvals",
    "GateApprovedError",
    "GateDecidedError",
    "GateDecision",
    "GateRejectedError",
    "Redemption",
    "TokenExpiredError",
    "TokenGateMismatchError",
    "TokenPlanMismatchError",
    "TokenReusedError",
    "TokenScopeError",
    "TokenUnknownError",
    "TokenUserMismatchError",
    "token_hash",
]
