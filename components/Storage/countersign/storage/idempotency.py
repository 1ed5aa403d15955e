"""The idempotency ledger (Stripe's rules for idempotency keys, plus an explicit ``unknown``).

States of a key ``plan_id:step:arg_hash``:

- ``in_progress`` — claimed by an owner with a lease. Before the request leaves
  (``sent_at`` NULL) an expired lease may be taken over: nothing was sent. After ``mark_sent``
  an expired lease means the outcome is unknown: the key moves to ``unknown``.
- ``completed`` — the stored result is returned to every later claim; nothing runs again.
- ``failed`` — the provider answered an error with no effect; a later claim may try again.
- ``unknown`` — never retried blindly; ``reconcile`` (a connector lookup or a person) settles it.

A claim with the same key but another request hash is an error (the key was reused for a
different request). Times come from an injected clock and are compared as SQL parameters.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy import Connection, text

from countersign.kernel import ascii_digits

from .db import Database
from .errors import (
    IdempotencyMismatchError,
    InProgressError,
    LedgerStateError,
    OutcomeUnknownError,
    StorageInputError,
)
from .sink import AuditSink

__all__ = ["Claim", "IdempotencyLedger"]

_KEY_MAX = 200


@dataclass(frozen=True)
class Claim:
    """The answer to a claim: run it (``claimed``) or use the stored result (``completed``)."""

    key: str
    state: Literal["claimed", "completed"]
    result: Any = None


_CLAIM_NEW = text(
    """
    INSERT INTO idempotency_keys (key, request_hash, state, owner, lease_until, created_at, updated_at)
    VALUES (:k, :h, 'in_progress', :o, :lease, :now, :now)
    ON CONFLICT (key) DO NOTHING RETURNING key
    """
)
_TAKE_OVER = text(
    "UPDATE idempotency_keys SET state = 'in_progress', owner = :o, lease_until = :lease, "
    "sent_at = NULL, error = NULL, updated_at = :now WHERE key = :k"
)


def _settled(cur: Any, key: str, request_hash: str, now: datetime) -> Claim | None:
    """What a claim of an existing key gets without taking it: the stored result of a completed
    key, or the refusal (another request, an unknown outcome, a live lease). None: the key may
    be taken (failed, or an expired lease)."""
    if cur.request_hash != request_hash:
        raise IdempotencyMismatchError(
            f"idempotency key {key} was used for another request ({cur.request_hash[:12]}… ≠ {request_hash[:12]}…)"
        )
    if cur.state == "completed":
        return Claim(key=key, state="completed", result=cur.result)
    if cur.state == "unknown":
        raise OutcomeUnknownError(
            f"idempotency key {key}: outcome unknown; reconcile before retrying"
        )
    if cur.state == "in_progress" and cur.lease_until > now:
        raise InProgressError(f"idempotency key {key} is in progress (owner {cur.owner})")
    return None


class IdempotencyLedger:
    """The ledger over the ``idempotency_keys`` table."""

    def __init__(
        self,
        db: Database,
        *,
        clock: Callable[[], datetime],
        audit: AuditSink,
        lease_s: float = 60.0,
        retention: timedelta = timedelta(days=30),
    ) -> None:
        if retention < timedelta(hours=24):
            raise StorageInputError("idempotency retention must be at least 24 h")
        self.db = db
        self._clock = clock
        self._audit = audit
        self._lease = timedelta(seconds=lease_s)
        self.retention = retention

    @staticmethod
    def _check(key: str, request_hash: str, owner: str) -> None:
        if not key or len(key) > _KEY_MAX or key.count(":") < 2:
            raise StorageInputError(
                f"idempotency key {key[:60]!r} must look like plan_id:step:arg_hash"
            )
        if len(request_hash) != 64:
            raise StorageInputError("request_hash must be a 64-character sha256 hex")
        if not owner or len(owner) > 128:
            raise StorageInputError("owner must be 1..128 characters")

    def claim(
        self,
        key: str,
        request_hash: str,
        *,
        owner: str,
        on_claimed: Callable[[Connection], object] | None = None,
    ) -> Claim:
        """Claim a key before running the request it guards.

        ``on_claimed(c)`` runs inside the claiming transaction when the key is claimed (new, or
        taken over): what it writes (the ``step_started`` audit row) commits with the claim or
        not at all (Storage SPEC, "IdempotencyLedger": one transaction per decision).

        Raises:
            InProgressError: someone holds it and their lease is live (HTTP 409).
            IdempotencyMismatchError: the key was used for a different request (HTTP 422).
            OutcomeUnknownError: an earlier attempt may have taken effect; reconcile first.
        """
        self._check(key, request_hash, owner)
        now = self._clock()
        with self.db.tx() as c:
            row = c.execute(
                _CLAIM_NEW,
                {"k": key, "h": request_hash, "o": owner, "lease": now + self._lease, "now": now},
            ).first()
            if row is not None:
                if on_claimed is not None:
                    on_claimed(c)
                return Claim(key=key, state="claimed")
            cur = c.execute(
                text("SELECT * FROM idempotency_keys WHERE key = :k FOR UPDATE"), {"k": key}
            ).one()
            settled = _settled(cur, key, request_hash, now)
            if settled is not None:
                return settled
            lost = cur.state == "in_progress" and cur.sent_at is not None
            if lost:
                # committed before raising: the key must stay `unknown` for everyone after us
                self._to_unknown(c, key, "lease expired after the request was sent")
            else:
                # failed, or in_progress whose lease expired before anything was sent: take over
                c.execute(
                    _TAKE_OVER, {"o": owner, "lease": now + self._lease, "now": now, "k": key}
                )
                if on_claimed is not None:
                    on_claimed(c)
        if lost:
            raise OutcomeUnknownError(
                f"idempotency key {key}: the request was sent and its holder vanished; reconcile before retrying"
            )
        return Claim(key=key, state="claimed")

    def _transition(
        self, key: str, owner: str, sql: str, params: dict[str, Any], what: str
    ) -> None:
        with self.db.tx() as c:
            n = c.execute(
                text(sql + " WHERE key = :k AND owner = :o AND state = 'in_progress'"),
                {**params, "k": key, "o": owner, "now": self._clock()},
            ).rowcount
            if n != 1:
                state = c.execute(
                    text("SELECT state, owner FROM idempotency_keys WHERE key = :k"), {"k": key}
                ).first()
                found = (
                    "no such key" if state is None else f"state {state.state}, owner {state.owner}"
                )
                raise LedgerStateError(f"cannot {what} idempotency key {key} as {owner}: {found}")

    def mark_sent(self, key: str, *, owner: str) -> None:
        """Record that the request is about to leave (from here on a crash means ``unknown``)."""
        self._transition(
            key,
            owner,
            "UPDATE idempotency_keys SET sent_at = :now, lease_until = :lease, updated_at = :now",
            {"lease": self._clock() + self._lease},
            "mark sent",
        )

    def complete(self, key: str, result: Any, *, owner: str) -> None:
        """Store the result; later claims get it back instead of running again."""
        self._transition(
            key,
            owner,
            "UPDATE idempotency_keys SET state = 'completed', result = CAST(:r AS jsonb), updated_at = :now",
            {"r": json.dumps(result)},
            "complete",
        )

    def fail(self, key: str, error: str, *, owner: str) -> None:
        """The provider answered an error without effect; a later claim may retry."""
        self._transition(
            key,
            owner,
            "UPDATE idempotency_keys SET state = 'failed', error = :e, updated_at = :now",
            {"e": error[:2000]},
            "fail",
        )

    def mark_unknown(self, key: str, reason: str, *, owner: str) -> None:
        """The holder lost track of the outcome (e.g. a timeout after sending)."""
        with self.db.tx() as c:
            cur = c.execute(
                text("SELECT owner, state FROM idempotency_keys WHERE key = :k FOR UPDATE"),
                {"k": key},
            ).first()
            if cur is None or cur.owner != owner or cur.state != "in_progress":
                raise LedgerStateError(f"cannot mark idempotency key {key} unknown as {owner}")
            self._to_unknown(c, key, reason)

    def _to_unknown(self, c: Connection, key: str, reason: str) -> None:
        c.execute(
            text(
                "UPDATE idempotency_keys SET state = 'unknown', error = :e, updated_at = :now WHERE key = :k"
            ),
            {"e": reason[:2000], "now": self._clock(), "k": key},
        )
        plan_id, step, _ = key.split(":", 2)
        self._audit.append(
            c,
            {
                "kind": "idempotency_unknown",
                "status": "unknown",
                "actor": "ledger",
                "plan_id": plan_id[:26],
                "step": int(step) if ascii_digits(step) else None,
                "reason": reason[:500],
            },
        )

    def recover_expired(self) -> list[str]:
        """Move every sent key whose holder's lease expired to ``unknown``; their keys."""
        now = self._clock()
        with self.db.tx() as c:
            keys = [
                r.key
                for r in c.execute(
                    text(
                        "SELECT key FROM idempotency_keys WHERE state = 'in_progress' AND sent_at IS NOT NULL "
                        "AND lease_until <= :now FOR UPDATE SKIP LOCKED"
                    ),
                    {"now": now},
                ).all()
            ]
            for k in keys:
                self._to_unknown(c, k, "lease expired after the request was sent")
        return keys

    def reconcile(
        self, key: str, *, outcome: Literal["completed", "failed"], result: Any = None, actor: str
    ) -> None:
        """Settle an ``unknown`` key from a connector lookup or a person's word."""
        with self.db.tx() as c:
            n = c.execute(
                text(
                    "UPDATE idempotency_keys SET state = :s, result = CAST(:r AS jsonb), updated_at = :now "
                    "WHERE key = :k AND state = 'unknown'"
                ),
                {"s": outcome, "r": json.dumps(result), "now": self._clock(), "k": key},
            ).rowcount
            if n != 1:
                raise LedgerStateError(f"idempotency key {key} is not waiting for reconciliation")
            plan_id, step, _ = key.split(":", 2)
            self._audit.append(
                c,
                {
                    "kind": "idempotency_reconciled",
                    "status": outcome,
                    "actor": actor,
                    "plan_id": plan_id[:26],
                    "step": int(step) if ascii_digits(step) else None,
                },
            )

    def unknown_keys(self, plan_id: str) -> list[dict[str, Any]]:
        """The plan's keys waiting for reconciliation (rows, oldest first)."""
        with self.db.tx() as c:
            rows = c.execute(
                text(
                    "SELECT * FROM idempotency_keys WHERE key LIKE :p AND state = 'unknown' "
                    "ORDER BY updated_at"
                ),
                {"p": plan_id.replace("%", "").replace("_", "") + ":%"},
            ).all()
        return [dict(r._mapping) for r in rows]

    def claimed(self, keys: list[str], *, conn: Connection | None = None) -> frozenset[str]:
        """Which of ``keys`` have a row, whatever its state — one statement for a gate's writes
        (``conn``: on the caller's connection: the executor asks under its resource lock)."""
        if not keys:
            return frozenset()
        sql = text("SELECT key FROM idempotency_keys WHERE key = ANY(:ks)")
        if conn is not None:
            return frozenset(str(r[0]) for r in conn.execute(sql, {"ks": list(keys)}))
        with self.db.tx() as c:
            return frozenset(str(r[0]) for r in c.execute(sql, {"ks": list(keys)}))

    def state(self, key: str, *, conn: Connection | None = None) -> dict[str, Any] | None:
        """The key's row (for status pages and tests); ``conn``: on the caller's connection (the
        executor asks on its resource lock's connection)."""
        sql = text("SELECT * FROM idempotency_keys WHERE key = :k")
        if conn is not None:
            row = conn.execute(sql, {"k": key}).first()
        else:
            with self.db.tx() as c:
                row = c.execute(sql, {"k": key}).first()
        return None if row is None else dict(row._mapping)

    def cleanup(self) -> int:
        """Delete settled keys (completed/failed) older than the retention; how many."""
        cutoff = self._clock() - self.retention
        with self.db.tx() as c:
            return int(
                c.execute(
                    text(
                        "DELETE FROM idempotency_keys WHERE state IN ('completed', 'failed') AND updated_at < :cut"
                    ),
                    {"cut": cutoff},
                ).rowcount
            )
