"""A plan's event log (``plan_events``, migration 0002): read by the services that report a plan.

Rows are written by the database itself: a trigger on ``audit_log`` numbers each audit row that
names a plan 1, 2, 3 … per plan in the same transaction, so nothing here inserts. A plan's status
is folded from these rows by whoever reports it (Api SPEC, the event log is the status); this
store only reads them, and gives a writer the per-plan lock that makes "record it once" hold
across processes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, text

from .db import Database
from .reads import ReadPool

__all__ = ["PlanEvents"]

_COLUMNS = "seq, ts, kind, step, op, status, actor, reason, details"


@dataclass
class PlanEvents:
    """Reads ``plan_events`` (oldest first); on the read pool when one is given."""

    db: Database
    reads: ReadPool | None = None

    def since(self, plan_id: str, after: int = 0, *, limit: int = 500) -> list[dict[str, Any]]:
        """Events of ``plan_id`` with ``seq > after``."""
        if self.reads is not None:
            return self.reads.events(plan_id, after, limit)
        with self.db.tx() as c:
            rows = c.execute(
                text(
                    f"SELECT {_COLUMNS} FROM plan_events WHERE plan_id = :p AND seq > :a "  # noqa: S608 - fixed text
                    "ORDER BY seq LIMIT :n"
                ),
                {"p": plan_id, "a": after, "n": limit},
            ).mappings()
            return [dict(r) for r in rows]

    def latest(
        self, plan_id: str, kind: str, *, having: str | None = None
    ) -> dict[str, Any] | None:
        """The newest event of ``kind`` of the plan (with ``having``: whose details hold that
        key), or None."""
        with self.db.tx() as c:
            row = (
                c.execute(
                    text(
                        f"SELECT {_COLUMNS} FROM plan_events WHERE plan_id = :p AND kind = :k "  # noqa: S608 - fixed text
                        "AND (CAST(:h AS text) IS NULL OR details ? CAST(:h AS text)) "
                        "ORDER BY seq DESC LIMIT 1"
                    ),
                    {"p": plan_id, "k": kind, "h": having},
                )
                .mappings()
                .first()
            )
        return None if row is None else dict(row)

    def open_ones(self, kind: str, *, until: str) -> list[dict[str, Any]]:
        """Every ``kind`` event (``plan_id``, ``details``) of the plans that have no ``until``
        event yet (a hand-off whose end is not recorded)."""
        with self.db.tx() as c:
            rows = c.execute(
                text(
                    "SELECT h.plan_id, h.details FROM plan_events h WHERE h.kind = :k "
                    "AND NOT EXISTS (SELECT 1 FROM plan_events f WHERE f.plan_id = h.plan_id "
                    "AND f.kind = :u) ORDER BY h.plan_id, h.seq"
                ),
                {"k": kind, "u": until},
            ).mappings()
            return [dict(r) for r in rows]

    @staticmethod
    def lock_absent(c: Connection, plan_id: str, kind: str) -> bool:
        """In the caller's transaction: take the plan's lock (held until it ends) and say whether
        the plan has no ``kind`` event yet — so of two writers recording the same end
        concurrently (the CLI while the API runs), the second finds the first one's row."""
        c.execute(text("SELECT pg_advisory_xact_lock(hashtext(:p))"), {"p": plan_id})
        found = c.execute(
            text("SELECT 1 FROM plan_events WHERE plan_id = :p AND kind = :k LIMIT 1"),
            {"p": plan_id, "k": kind},
        ).first()
        return found is None
