"""Audit: the tamper-evident, append-only decision log (hash chain over Postgres rows)."""

from .store import (
    ZERO_HASH,
    AuditEntry,
    AuditHeadMissingError,
    AuditLog,
    ChainReport,
    PreparedEntry,
    content_hash,
    row_hash,
)
from .writer import GroupCommitAuditWriter

__all__ = [
    "ZERO_HASH",
    "AuditEntry",
    "AuditHeadMissingError",
    "AuditLog",
    "ChainReport",
    "GroupCommitAuditWriter",
    "PreparedEntry",
    "content_hash",
    "row_hash",
]
