"""Audit: the tamper-evident, append-only decision log (hash chain over Postgres rows)."""

from .store import (
    ZERO_HASH,
    AuditEntry,
    AuditHeadMissingError,
    AuditLog,
    ChainReport,
    content_hash,
    row_hash,
)

__all__ = [
    "ZERO_HASH",
    "AuditEntry",
    "AuditHeadMissingError",
    "AuditLog",
    "ChainReport",
    "content_hash",
    "row_hash",
]
