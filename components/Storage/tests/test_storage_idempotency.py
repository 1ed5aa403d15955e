"""The idempotency ledger on the real Postgres: one runner, replay, mismatch, crash → unknown."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from countersign.audit import AuditLog
from countersign.kernel import content_hash, system_clock
from countersign.steps import idempotency_key
from countersign.storage import (
    Database,
    IdempotencyLedger,
    IdempotencyMismatchError,
    InProgressError,
    LedgerStateError,
    OutcomeUnknownError,
    StorageInputError,
)

PLAN = "01JDQ3Z0000000000000000001"
ARGS: dict[str, Any] = {"uid": "x-5", "title": "Sync"}
KEY = idempotency_key(PLAN, 5, ARGS)
REQ = content_hash(ARGS)


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def test_concurrent_claims_one_runs(db: Database) -> None:
    ledger = IdempotencyLedger(db, clock=system_clock, audit=AuditLog(clock=system_clock))
    barrier = threading.Barrier(20)
    outcomes: list[str] = []
    lock = threading.Lock()

    def go(i: int) -> None:
        barrier.wait()
        try:
            ledger.claim(KEY, REQ, owner=f"worker-{i}")
            out = "claimed"
        except InProgressError:
            out = "busy"
        with lock:
            outcomes.append(out)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count("claimed") == 1 and outcomes.count("busy") == 19


def test_replay_after_completion_returns_stored_result(db: Database) -> None:
    ledger = IdempotencyLedger(db, clock=system_clock, audit=AuditLog(clock=system_clock))
    assert ledger.claim(KEY, REQ, owner="w1").state == "claimed"
    ledger.mark_sent(KEY, owner="w1")
    ledger.complete(KEY, {"id": "evt-1", "status": 201}, owner="w1")
    again = ledger.claim(KEY, REQ, owner="w2")
    assert again.state == "completed" and again.result == {"id": "evt-1", "status": 201}


def test_same_key_other_request_is_an_error(db: Database) -> None:
    ledger = IdempotencyLedger(db, clock=system_clock, audit=AuditLog(clock=system_clock))
    ledger.claim(KEY, REQ, owner="w1")
    with pytest.raises(IdempotencyMismatchError):
        ledger.claim(KEY, content_hash({"uid": "x-5", "title": "Other"}), owner="w2")


def test_crash_after_send_leaves_unknown_never_retried(db: Database) -> None:
    clock = Clock()
    ledger = IdempotencyLedger(db, clock=clock, lease_s=30, audit=AuditLog(clock=system_clock))
    ledger.claim(KEY, REQ, owner="w1")
    ledger.mark_sent(KEY, owner="w1")
    # the process dies here: no complete, no fail
    clock.now += timedelta(seconds=31)
    with pytest.raises(OutcomeUnknownError):
        ledger.claim(KEY, REQ, owner="w2")
    with pytest.raises(OutcomeUnknownError):
        ledger.claim(KEY, REQ, owner="w3")
    state = ledger.state(KEY)
    assert state is not None and state["state"] == "unknown"
    ledger.reconcile(KEY, outcome="completed", result={"id": "evt-1"}, actor="caldav lookup")
    assert ledger.claim(KEY, REQ, owner="w4").result == {"id": "evt-1"}
    with db.tx() as c:
        kinds = [r.kind for r in c.execute(text("SELECT kind FROM audit_log ORDER BY seq"))]
        assert kinds == ["idempotency_unknown", "idempotency_reconciled"]
        assert AuditLog(clock=system_clock).verify(c).ok


def test_crash_before_send_can_be_taken_over(db: Database) -> None:
    clock = Clock()
    ledger = IdempotencyLedger(db, clock=clock, lease_s=30, audit=AuditLog(clock=system_clock))
    ledger.claim(KEY, REQ, owner="w1")
    with pytest.raises(InProgressError):
        ledger.claim(KEY, REQ, owner="w2")
    clock.now += timedelta(seconds=31)
    assert ledger.claim(KEY, REQ, owner="w2").state == "claimed"
    with pytest.raises(LedgerStateError):
        ledger.complete(KEY, {}, owner="w1")  # the old holder lost it


def test_failed_may_retry_and_recover_expired(db: Database) -> None:
    clock = Clock()
    ledger = IdempotencyLedger(db, clock=clock, lease_s=30, audit=AuditLog(clock=system_clock))
    ledger.claim(KEY, REQ, owner="w1")
    ledger.fail(KEY, "provider said 400", owner="w1")
    assert ledger.claim(KEY, REQ, owner="w2").state == "claimed"
    ledger.mark_sent(KEY, owner="w2")
    clock.now += timedelta(seconds=60)
    assert ledger.recover_expired() == [KEY]
    assert (ledger.state(KEY) or {})["state"] == "unknown"


def test_retention_and_cleanup(db: Database) -> None:
    clock = Clock()
    with pytest.raises(StorageInputError):
        IdempotencyLedger(
            db, retention=timedelta(hours=1), clock=system_clock, audit=AuditLog(clock=system_clock)
        )
    ledger = IdempotencyLedger(
        db, clock=clock, retention=timedelta(hours=24), audit=AuditLog(clock=system_clock)
    )
    ledger.claim(KEY, REQ, owner="w1")
    ledger.complete(KEY, {"ok": True}, owner="w1")
    clock.now += timedelta(hours=23)
    assert ledger.cleanup() == 0
    clock.now += timedelta(hours=2)
    assert ledger.cleanup() == 1


@pytest.mark.parametrize(
    ("key", "req", "owner"), [("nocolons", REQ, "w"), (KEY, "short", "w"), (KEY, REQ, "")]
)
def test_bad_input_leaves_no_rows(db: Database, key: str, req: str, owner: str) -> None:
    with pytest.raises(StorageInputError):
        IdempotencyLedger(db, clock=system_clock, audit=AuditLog(clock=system_clock)).claim(
            key, req, owner=owner
        )
    with db.tx() as c:
        assert c.execute(text("SELECT count(*) FROM idempotency_keys")).scalar() == 0


def test_plan_store_roundtrip_conflict_and_bad_input(
    db: Database, registry: Any, keyring: Any
) -> None:
    from countersign.kernel import Plan, Policy
    from countersign.planner import make_plan
    from countersign.planner.testing import make_intent
    from countersign.signer import sign_plan
    from countersign.storage import PlanConflictError, PlanStore

    plan = make_plan(make_intent(), [], registry, Policy())
    assert isinstance(plan, Plan)
    pid, key = keyring.active()
    signed = sign_plan(plan, key=key, pubkey_id=pid, signer="planner@system")
    env, digest, canonical = signed.envelope, signed.plan_hash, signed.canonical
    store = PlanStore(db, clock=system_clock)
    with pytest.raises(StorageInputError, match="sha256"):
        store.save_signed(plan, env, "0" * 64, canonical)
    assert store.save_signed(plan, env, digest, canonical) is True
    assert store.save_signed(plan, env, digest, canonical) is False
    got = store.get(plan.plan_id)
    assert (
        got is not None and got["canonical"] == canonical and len(got["steps"]) == len(plan.graph)
    )
    with pytest.raises(StorageInputError, match="banana"):
        store.set_step(plan.plan_id, 1, "banana")
    other = plan.model_copy(
        update={"constraints": plan.constraints.model_copy(update={"ttl_s": 901})}
    )
    from countersign.kernel import canonical_bytes, sha256_hex

    ob = canonical_bytes(other.to_json())
    with pytest.raises(PlanConflictError):
        store.save_signed(other, env, sha256_hex(ob), ob)
