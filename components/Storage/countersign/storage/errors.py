"""Storage errors."""

from __future__ import annotations

from countersign.kernel import CountersignError, InputError

__all__ = [
    "IdempotencyMismatchError",
    "InProgressError",
    "LedgerStateError",
    "OutcomeUnknownError",
    "PlanConflictError",
    "ResourceBusyError",
    "SchemaTooNewError",
    "StorageConstraintError",
    "StorageError",
    "StorageInputError",
]


class StorageError(CountersignError):
    """The database could not be reached or refused an operation."""

    code = "storage_error"
    retryable = True


class StorageConstraintError(StorageError):
    """A statement broke a constraint (a unique key, a foreign key, a check): the row conflicts
    with one already stored. Callers that expect a conflict catch this, never the driver's error."""

    code = "storage_constraint"
    retryable = False


class StorageInputError(InputError):
    """A storage call got input it cannot store (names the field)."""

    code = "storage_invalid_input"


class SchemaTooNewError(StorageError):
    """The database was migrated by a newer Countersign than this one."""

    code = "schema_too_new"
    retryable = False


class PlanConflictError(StorageError):
    """A plan id is already stored with different content."""

    code = "plan_conflict"
    retryable = False


class InProgressError(StorageError):
    """The idempotency key is held by a request still running (HTTP 409)."""

    code = "idempotency_in_progress"
    retryable = True


class IdempotencyMismatchError(StorageError):
    """The key was used before with a different request (HTTP 422)."""

    code = "idempotency_mismatch"
    retryable = False


class OutcomeUnknownError(StorageError):
    """The request may or may not have taken effect; it waits for reconciliation, never a retry."""

    code = "idempotency_outcome_unknown"
    retryable = False


class LedgerStateError(StorageError):
    """A ledger transition that the key's state does not allow (e.g. completing a key you do not hold)."""

    code = "idempotency_bad_transition"
    retryable = False


class ResourceBusyError(StorageError):
    """Another writer held a resource this write needs for longer than the wait allowed (HTTP
    409): nothing was written; the person can try again or re-plan."""

    code = "resource_busy"
    retryable = True

    def __init__(self, key: str, wait_s: float) -> None:
        super().__init__(
            f"another plan is writing to {key} and held it for {wait_s:g} s; nothing was "
            "written: try again, or plan again if what you saw has changed"
        )
        self.key = key
