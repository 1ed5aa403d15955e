"""``AuditSink``: where the stores of this floor write their audit rows.

Storage is the bottom floor (it imports only Kernel); the hash-chained log lives one floor up
(``countersign.audit.AuditLog``), which satisfies this protocol. A store that must audit takes a
sink and appends inside its own transaction, so the change and its audit row commit together.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from sqlalchemy.engine import Connection

__all__ = ["AuditSink"]


class AuditSink(Protocol):
    """Appends one audit row inside the caller's transaction; returns its sequence number."""

    def append(self, conn: Connection, entry: Mapping[str, Any]) -> int:
        """Append ``entry`` (an ``AuditEntry``-shaped mapping) in ``conn``'s transaction."""
        ...
