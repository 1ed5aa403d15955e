"""Storage: PostgreSQL (+pgvector) for signed plans, approvals, the idempotency ledger, history."""

from .db import Database, alembic_config, embedded_server, embedded_url, stop_embedded
from .errors import (
    IdempotencyMismatchError,
    InProgressError,
    LedgerStateError,
    OutcomeUnknownError,
    PlanConflictError,
    ResourceBusyError,
    SchemaTooNewError,
    StorageConstraintError,
    StorageError,
    StorageInputError,
)
from .events import PlanEvents
from .idempotency import Claim, IdempotencyLedger
from .locks import ResourceLocks
from .plans import PlanStore, stored_document
from .reads import ReadPool, libpq_url
from .sink import AuditSink

__all__ = [
    "AuditSink",
    "Claim",
    "Database",
    "IdempotencyLedger",
    "IdempotencyMismatchError",
    "InProgressError",
    "LedgerStateError",
    "OutcomeUnknownError",
    "PlanConflictError",
    "PlanEvents",
    "PlanStore",
    "ReadPool",
    "ResourceBusyError",
    "ResourceLocks",
    "SchemaTooNewError",
    "StorageConstraintError",
    "StorageError",
    "StorageInputError",
    "alembic_config",
    "embedded_server",
    "embedded_url",
    "libpq_url",
    "stop_embedded",
    "stored_document",
]
