"""Signed plans, per-step status and preview fingerprints."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text

from countersign.kernel import Plan, SignatureEnvelope, loads_strict, sha256_hex

from .db import Database
from .errors import PlanConflictError, StorageInputError

__all__ = ["PlanStore"]

_STEP_STATUSES = {"pending", "previewed", "running", "done", "failed", "compensated", "skipped"}
_STATUSES = {
    "signed",
    "previewed",
    "executing",
    "waiting",
    "completed",
    "failed",
    "rejected",
    "stale",
}


_INSERT_PLAN = text(
    """
    INSERT INTO plans (plan_id, plan_hash, canonical, envelope, user_id, intent,
                       registry_version, policy_version, status, created_at, updated_at)
    VALUES (:plan_id, :plan_hash, :canonical, CAST(:envelope AS jsonb), :user_id, :intent,
            :rv, :pv, 'signed', :now, :now)
    ON CONFLICT (plan_id) DO NOTHING
    RETURNING plan_id
    """
)


def _check_same(c: Connection, plan_id: str, plan_hash: str) -> None:
    """A plan id stored already must be stored with this hash (saving it again is a no-op)."""
    existing = c.execute(
        text("SELECT plan_hash FROM plans WHERE plan_id = :p"), {"p": plan_id}
    ).scalar_one()
    if existing != plan_hash:
        raise PlanConflictError(
            f"plan {plan_id} is stored with hash {existing[:16]}…, not {plan_hash[:16]}…"
        )


_PASS_GATE = text(
    """
    WITH s AS (
      UPDATE plan_steps SET status = 'done', updated_at = :now, output = CAST(:out AS jsonb)
      WHERE plan_id = :p AND step = :s RETURNING plan_id
    )
    UPDATE plans SET status = 'executing', updated_at = :now
    WHERE plan_id = :p AND EXISTS (SELECT 1 FROM s)
    """
)


class PlanStore:
    """Signed plans as signed: canonical bytes, envelope, hash, provenance, status."""

    def __init__(self, db: Database, *, clock: Callable[[], datetime]) -> None:
        self.db = db
        self._clock = clock

    @contextlib.contextmanager
    def _tx(self, conn: Connection | None) -> Iterator[Connection]:
        """The caller's transaction when it passes one (one commit for several stores), else a
        new one."""
        if conn is not None:
            yield conn
        else:
            with self.db.tx() as c:
                yield c

    def save_signed(
        self,
        plan: Plan,
        envelope: SignatureEnvelope,
        plan_hash: str,
        canonical: bytes,
        *,
        on_insert: Callable[[Connection], None] | None = None,
        conn: Connection | None = None,
    ) -> bool:
        """Store a verified plan. Idempotent: the same plan again is a no-op (False).

        Args:
            on_insert: runs in the same transaction when the plan is new (its audit row), so a
                stored plan always has one.
            conn: run inside this open transaction instead of a new one.

        Raises:
            StorageInputError: ``plan_hash`` is not the sha256 of ``canonical``.
            PlanConflictError: the plan id is stored with another hash.
        """
        if sha256_hex(canonical) != plan_hash:
            raise StorageInputError(
                f"plan {plan.plan_id}: plan_hash is not the sha256 of the canonical bytes"
            )
        now = self._clock()
        with self._tx(conn) as c:
            inserted = c.execute(
                _INSERT_PLAN,
                {
                    "plan_id": plan.plan_id,
                    "plan_hash": plan_hash,
                    "canonical": canonical,
                    "envelope": json.dumps(envelope.to_json()),
                    "user_id": plan.intent.user_id,
                    "intent": plan.intent.intent,
                    "rv": plan.meta.registry_version,
                    "pv": plan.meta.policy_version,
                    "now": now,
                },
            ).first()
            if inserted is None:
                _check_same(c, plan.plan_id, plan_hash)
                return False
            for s in plan.graph:
                c.execute(
                    text(
                        "INSERT INTO plan_steps (plan_id, step, status, updated_at) "
                        "VALUES (:p, :s, 'pending', :now)"
                    ),
                    {"p": plan.plan_id, "s": s.step, "now": now},
                )
            if on_insert is not None:
                on_insert(c)
            return True

    def get(
        self, plan_id: str, *, owner: str | None = None, conn: Connection | None = None
    ) -> dict[str, Any] | None:
        """The plan row and its steps, or None (also, with ``owner``, when another user's: the
        owner is part of the lookup, so both cost the same); ``conn``: inside the caller's open
        transaction (the executor reads the plan in the transaction that stores it)."""
        sql = (
            "SELECT * FROM plans WHERE plan_id = :p AND (CAST(:u AS text) IS NULL OR user_id = :u)"
        )
        with self._tx(conn) as c:
            row = c.execute(text(sql), {"p": plan_id, "u": owner}).first()
            if row is None:
                return None
            steps = c.execute(
                text(
                    "SELECT step, status, output, fingerprint, updated_at FROM plan_steps WHERE plan_id = :p ORDER BY step"
                ),
                {"p": plan_id},
            ).all()
        out = dict(row._mapping)
        out["canonical"] = bytes(out["canonical"])
        out["steps"] = [dict(s._mapping) for s in steps]
        return out

    def signed_document(self, plan_id: str) -> dict[str, Any] | None:
        """The signed-plan document rebuilt from the stored bytes (re-verify before use)."""
        row = self.get(plan_id)
        return None if row is None else stored_document(row)

    def set_status(self, plan_id: str, status: str, *, conn: Connection | None = None) -> None:
        """Set the plan's status (``conn``: inside the caller's open transaction)."""
        if status not in _STATUSES:
            raise StorageInputError(f"plan status {status!r} is not one of {sorted(_STATUSES)}")
        with self._tx(conn) as c:
            n = c.execute(
                text("UPDATE plans SET status = :s, updated_at = :now WHERE plan_id = :p"),
                {"s": status, "now": self._clock(), "p": plan_id},
            ).rowcount
        if n != 1:
            raise StorageInputError(f"no plan {plan_id!r}")

    def set_step(
        self,
        plan_id: str,
        step: int,
        status: str,
        *,
        output: Any = None,
        fingerprint: str | None = None,
        conn: Connection | None = None,
        must_exist: bool = True,
    ) -> None:
        """Record a step's status (and output / fingerprint when given); ``conn``: inside the
        caller's open transaction (a write's claim marks its step ``running``); ``must_exist``
        False: a step the plan does not have (a compensation's number) changes nothing and is
        not an error."""
        if status not in _STEP_STATUSES:
            raise StorageInputError(
                f"step status {status!r} is not one of {sorted(_STEP_STATUSES)}"
            )
        with self._tx(conn) as c:
            n = c.execute(
                text(
                    """
                    UPDATE plan_steps SET status = :st, updated_at = :now,
                      output = COALESCE(CAST(:out AS jsonb), output),
                      fingerprint = COALESCE(:fp, fingerprint)
                    WHERE plan_id = :p AND step = :s
                    """
                ),
                {
                    "st": status,
                    "now": self._clock(),
                    "out": None if output is None else json.dumps(output),
                    "fp": fingerprint,
                    "p": plan_id,
                    "s": step,
                },
            ).rowcount
        if n != 1 and must_exist:
            raise StorageInputError(f"no step {step} in plan {plan_id!r}")

    def pass_gate(
        self, plan_id: str, step: int, *, output: Any, conn: Connection | None = None
    ) -> None:
        """A gate passed: its step ``done`` with ``output`` (the choice) and the plan
        ``executing``, in one statement (one round trip, atomic even on an ``AUTOCOMMIT``
        connection such as a resource lock's); ``conn``: on the caller's connection."""
        now = self._clock()
        with self._tx(conn) as c:
            n = c.execute(
                _PASS_GATE,
                {"now": now, "out": json.dumps(output), "p": plan_id, "s": step},
            ).rowcount
        if n != 1:
            raise StorageInputError(f"no step {step} in plan {plan_id!r}")

    def save_preview(
        self,
        plan_id: str,
        outputs: Mapping[int, Any],
        fingerprints: Mapping[int, str],
        *,
        conn: Connection | None = None,
    ) -> None:
        """Store what each preview read returned and its fingerprint (one transaction, or the
        caller's ``conn``)."""
        now = self._clock()
        with self._tx(conn) as c:
            for n, fp in fingerprints.items():
                k = c.execute(
                    text(
                        "UPDATE plan_steps SET status = 'previewed', output = CAST(:o AS jsonb), "
                        "fingerprint = :fp, updated_at = :now WHERE plan_id = :p AND step = :s"
                    ),
                    {"o": json.dumps(outputs.get(n)), "fp": fp, "now": now, "p": plan_id, "s": n},
                ).rowcount
                if k != 1:
                    raise StorageInputError(f"no step {n} in plan {plan_id!r}")
            c.execute(
                text(
                    "UPDATE plans SET status = 'previewed', updated_at = :now WHERE plan_id = :p AND status = 'signed'"
                ),
                {"now": now, "p": plan_id},
            )

    @staticmethod
    def preview_in(row: Mapping[str, Any] | None) -> tuple[dict[int, Any], dict[int, str]]:
        """``preview_of`` from a row ``get`` returned (the steps with a fingerprint), so a caller
        that needs both the plan's progress and its preview reads the plan once."""
        seen = [
            s for s in (row["steps"] if row is not None else []) if s["fingerprint"] is not None
        ]
        return (
            {int(s["step"]): s["output"] for s in seen},
            {int(s["step"]): str(s["fingerprint"]) for s in seen},
        )

    def preview_of(self, plan_id: str) -> tuple[dict[int, Any], dict[int, str]]:
        """The stored preview outputs and fingerprints of a plan's reads."""
        with self.db.tx() as c:
            rows = c.execute(
                text(
                    "SELECT step, output, fingerprint FROM plan_steps WHERE plan_id = :p AND fingerprint IS NOT NULL"
                ),
                {"p": plan_id},
            ).all()
        return {r.step: r.output for r in rows}, {r.step: r.fingerprint for r in rows}

    def page(
        self, user_id: str, *, limit: int, before: tuple[datetime, str] | None = None
    ) -> list[dict[str, Any]]:
        """``user_id``'s plans (``plan_id``, ``intent``, ``created_at``), newest first: at most
        ``limit``, those ordered after the keyset ``before`` (``created_at``, ``plan_id``) when
        given."""
        where, params = "user_id = :u", {"u": user_id, "n": limit}
        if before is not None:
            where += " AND (created_at, plan_id) < (:at, :pid)"
            params |= {"at": before[0], "pid": before[1]}
        with self.db.tx() as c:
            return [
                dict(r)
                for r in c.execute(
                    text(
                        f"SELECT plan_id, intent, created_at FROM plans WHERE {where} "  # noqa: S608 - fixed text
                        "ORDER BY created_at DESC, plan_id DESC LIMIT :n"
                    ),
                    params,
                ).mappings()
            ]


def stored_document(row: Mapping[str, Any]) -> dict[str, Any]:
    """The signed-plan document as stored (``plans`` row: canonical bytes, envelope, hash) —
    unverified: whoever runs it verifies it first."""
    return {
        "plan": loads_strict(bytes(row["canonical"]), what=f"stored plan {row['plan_id']}"),
        "signature": row["envelope"],
        "plan_hash": row["plan_hash"],
    }
