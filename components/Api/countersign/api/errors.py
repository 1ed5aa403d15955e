"""The service's own errors (each a ``CountersignError`` with a stable code; GLOBAL_SPEC.md)."""

from __future__ import annotations

from countersign.kernel import CountersignError, InputError

__all__ = [
    "AdminOnlyError",
    "ApiError",
    "AuthError",
    "BadCursorError",
    "ConversationNotFoundError",
    "DurableUpdateError",
    "ForgetIncompleteError",
    "PlanCancelledError",
    "PlanFinishedError",
    "PlanNotFoundError",
    "RateLimitedError",
    "RegistryItemNotFoundError",
    "TemporalUnavailableError",
    "TextNotSupportedError",
    "UnknownUserError",
    "UserExistsError",
    "UserMismatchError",
]


class ApiError(CountersignError):
    """Root of the service's own refusals."""

    code = "api_error"


class AuthError(ApiError):
    """No valid credentials (missing, unknown, revoked or expired key, session or link)."""

    code = "unauthenticated"


class AdminOnlyError(ApiError):
    """Only an admin may do this."""

    code = "admin_only"


class RateLimitedError(ApiError):
    """Too many requests for this key; try again in a minute."""

    code = "rate_limited"
    retryable = True


class PlanNotFoundError(ApiError):
    """No such plan for this caller (another user's plan is reported the same way)."""

    code = "plan_not_found"


class RegistryItemNotFoundError(ApiError):
    """No such connector or intent in the registry."""

    code = "registry_item_not_found"


class DurableUpdateError(ApiError):
    """A plan running on Temporal refused or could not take a decision (not waiting yet, already
    decided, no Temporal client)."""

    code = "durable_update_refused"


class TemporalUnavailableError(ApiError):
    """Temporal did not answer (or refused) a call this service needed (listing or deleting
    runs when a person is forgotten)."""

    code = "temporal_unavailable"
    retryable = True


class ForgetIncompleteError(ApiError):
    """A forget could not erase a runtime's records (n8n or Temporal down): no table row was
    deleted yet, so the same forget again finds and finishes everything (ContextRAG SPEC §4)."""

    code = "forget_incomplete"
    retryable = True

    def __init__(
        self, message: str, *, pending: dict[str, str], erased: dict[str, int | None]
    ) -> None:
        super().__init__(message)
        self.pending, self.erased = pending, erased


class ConversationNotFoundError(ApiError):
    """No such conversation for this caller (another user's is reported the same way)."""

    code = "conversation_not_found"


class PlanCancelledError(ApiError):
    """The plan was cancelled; nothing more of it runs."""

    code = "plan_cancelled"


class PlanFinishedError(ApiError):
    """The plan already ended (completed, failed, rejected, cancelled, expired): it cannot be
    cancelled or decided any more; the message names its status."""

    code = "plan_finished"


class TextNotSupportedError(InputError):
    """Chat text is not understood yet: send a structured intent."""

    code = "text_not_supported"


class BadCursorError(InputError):
    """A cursor or Last-Event-ID this API did not issue."""

    code = "invalid_cursor"


class UserMismatchError(InputError):
    """A request body names another user than the caller."""

    code = "user_mismatch"


class UserExistsError(InputError):
    """``users add`` for a name that exists."""

    code = "user_exists"


class UnknownUserError(InputError):
    """``users revoke`` for a name that does not exist."""

    code = "user_unknown"
