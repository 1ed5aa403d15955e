"""Hot single-statement reads on a psycopg pool of autocommit connections.

A read that answers a request by itself (who a key belongs to; a plan with its steps and events; a
page of a plan's events) needs no transaction: each is one statement, so one round trip on a ready
connection (~0.1 ms) instead of SQLAlchemy's check-out ping, BEGIN and COMMIT (~0.5 ms). Writes
keep going through ``Database.tx`` with their audit rows.

The statements on Storage's tables (``plans``, ``plan_steps``, ``plan_events``) live here; another
component's store runs its own statement on the pool through :meth:`ReadPool.one` (the Api's key
lookup on ``api_users``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from .db import Database

__all__ = ["ReadPool"]

_PLAN = """
SELECT p.plan_id, p.user_id, p.plan_hash, p.canonical, p.envelope, p.intent, p.created_at,
  (SELECT coalesce(json_agg(json_build_object('step', s.step, 'output', s.output,
                                              'status', s.status, 'fingerprint', s.fingerprint)
                            ORDER BY s.step), '[]'::json)
     FROM plan_steps s WHERE s.plan_id = p.plan_id) AS steps,
  (SELECT coalesce(json_agg(json_build_object('seq', e.seq, 'kind', e.kind, 'step', e.step,
                                              'op', e.op, 'status', e.status,
                                              'workflow_id', CASE WHEN e.kind = 'handed_off'
                                                THEN e.details->>'workflow_id' END,
                                              'details', CASE WHEN e.kind IN
                                                ('preview_run', 'watcher_polled')
                                                THEN e.details END)
                            ORDER BY e.seq),
                   '[]'::json)
     FROM plan_events e WHERE e.plan_id = p.plan_id) AS events
FROM plans p WHERE p.plan_id = %(p)s AND p.user_id = %(u)s
"""
_EVENTS = (
    "SELECT seq, ts, kind, step, op, status, actor, reason, details FROM plan_events "
    "WHERE plan_id = %(p)s AND seq > %(a)s ORDER BY seq LIMIT %(n)s"
)


@dataclass
class ReadPool:
    """Single-statement reads on autocommit connections."""

    pool: ConnectionPool

    @classmethod
    def open(cls, dsn: str, *, size: int = 8) -> ReadPool:
        """A pool on ``dsn`` (libpq form), opened now."""
        pool = ConnectionPool(
            dsn,
            min_size=2,
            max_size=size,
            kwargs={"autocommit": True, "row_factory": dict_row},
            # a connection PostgreSQL closed (a restart, a terminated backend) is replaced at
            # checkout instead of failing the request that drew it
            check=ConnectionPool.check_connection,
            open=True,
            name="countersign-api-reads",
        )
        return cls(pool)

    @classmethod
    def for_database(cls, db: Database, *, size: int = 8) -> ReadPool:
        """A pool on the same database as ``db`` (its URL in libpq form), opened now."""
        return cls.open(libpq_url(db), size=size)

    def close(self) -> None:
        """Close every connection."""
        self.pool.close()

    def one(self, sql: str, params: dict[str, Any]) -> dict[str, Any] | None:
        """The first row of one statement (``%(name)s`` parameters), or None."""
        with self.pool.connection() as c:
            row: dict[str, Any] | None = c.execute(sql, params).fetchone()  # type: ignore[assignment]
            return row

    def plan(self, plan_id: str, user_id: str) -> dict[str, Any] | None:
        """``user_id``'s plan row with ``steps`` (outputs) and ``events`` (compact) in one
        statement; None when there is no such plan *of that user*. The owner is part of the
        lookup, not a check after it: another user's plan costs what a missing one costs (no
        steps and events aggregated), so its 404 cannot be told apart by timing (Api SPEC)."""
        return self.one(_PLAN, {"p": plan_id, "u": user_id})

    def events(self, plan_id: str, after: int, limit: int) -> list[dict[str, Any]]:
        """Events of a plan after ``after`` (oldest first)."""
        with self.pool.connection() as c:
            rows: list[dict[str, Any]] = c.execute(  # type: ignore[assignment]
                _EVENTS, {"p": plan_id, "a": after, "n": limit}
            ).fetchall()
            return rows


def libpq_url(db: Database) -> str:
    """``db``'s URL as libpq takes it (psycopg's own pools and LISTEN connections)."""
    return db.engine.url.render_as_string(hide_password=False).replace("+psycopg", "")
