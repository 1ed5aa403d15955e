"""The audit chain detects a changed, deleted or inserted row, and names the first broken one."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import text

from countersign.audit import AuditEntry, AuditLog
from countersign.kernel import ContractError, system_clock
from countersign.storage import Database


def _fill(db: Database, n: int) -> None:
    log = AuditLog(clock=system_clock)
    for i in range(n):
        with db.tx() as c:
            log.append(
                c,
                {
                    "kind": "step_finished",
                    "status": "ok",
                    "actor": "test",
                    "plan_id": "01JDQ3Z0000000000000000001",
                    "step": i,
                    "latency_ms": 5,
                },
            )


def _verify(db: Database) -> tuple[bool, int | None, str | None]:
    with db.tx() as c:
        r = AuditLog(clock=system_clock).verify(c)
    return r.ok, r.first_bad_seq, r.reason


def test_intact_chain(db: Database) -> None:
    _fill(db, 10)
    assert _verify(db) == (True, None, None)


def test_changed_row(db: Database) -> None:
    _fill(db, 10)
    with db.tx() as c:
        c.execute(text("UPDATE audit_log SET status = 'error' WHERE seq = 4"))
    ok, bad, why = _verify(db)
    assert not ok and bad == 4 and "changed" in (why or "")


def test_deleted_row(db: Database) -> None:
    _fill(db, 10)
    with db.tx() as c:
        c.execute(text("DELETE FROM audit_log WHERE seq = 6"))
    ok, bad, _ = _verify(db)
    assert not ok and bad == 6


def test_deleted_newest_rows(db: Database) -> None:
    _fill(db, 10)
    with db.tx() as c:
        c.execute(text("DELETE FROM audit_log WHERE seq >= 9"))
    ok, bad, why = _verify(db)
    assert not ok and bad == 9 and "newest" in (why or "")


def test_inserted_row(db: Database) -> None:
    _fill(db, 5)
    with db.tx() as c:
        c.execute(text("UPDATE audit_log SET seq = seq + 1000 WHERE seq >= 3"))
        c.execute(text("UPDATE audit_log SET seq = seq - 999 WHERE seq >= 1000"))
        c.execute(
            text(
                "INSERT INTO audit_log (seq, ts, kind, status, actor, retries, details, content_hash, prev_hash, row_hash) "
                "SELECT 3, ts, 'gate_approved', 'ok', 'mallory', 0, '{}', content_hash, prev_hash, row_hash FROM audit_log WHERE seq = 2"
            )
        )
    ok, bad, _ = _verify(db)
    assert not ok and bad == 3


def test_concurrent_appends_never_fork(db: Database) -> None:
    log = AuditLog(clock=system_clock)

    def go() -> None:
        for _ in range(20):
            with db.tx() as c:
                log.append(c, {"kind": "step_started", "status": "ok", "actor": "t"})

    threads = [threading.Thread(target=go) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ok, _, _ = _verify(db)
    assert ok
    with db.tx() as c:
        assert c.execute(text("SELECT count(*) FROM audit_log")).scalar() == 160


def test_append_rolls_back_with_the_decision(db: Database) -> None:
    with pytest.raises(RuntimeError), db.tx() as c:
        AuditLog(clock=system_clock).append(
            c, {"kind": "gate_approved", "status": "ok", "actor": "a"}
        )
        raise RuntimeError("the decision failed")
    with db.tx() as c:
        assert c.execute(text("SELECT count(*) FROM audit_log")).scalar() == 0
    assert _verify(db)[0]


@pytest.mark.parametrize(
    "entry",
    [
        {"kind": "x", "status": "ok", "actor": "a"},
        {"kind": "gate_approved", "status": "ok", "actor": "a", "details": {"token": "cst_abc"}},
        {"kind": "gate_approved", "status": "ok", "actor": "a", "details": {"email_body": "hi"}},
        {"kind": "gate_approved", "status": "ok", "actor": "a", "colour": "red"},
    ],
)
def test_bad_entries_refused_without_rows(db: Database, entry: dict[str, object]) -> None:
    with pytest.raises(ContractError), db.tx() as c:
        AuditLog(clock=system_clock).append(c, entry)
    with db.tx() as c:
        assert c.execute(text("SELECT count(*) FROM audit_log")).scalar() == 0


def test_entry_model_is_public() -> None:
    assert AuditEntry(kind="plan_signed", status="ok", actor="planner").retries == 0


def test_append_many_continues_the_same_chain(db: Database) -> None:
    _fill(db, 3)
    with db.tx() as c:
        seqs = AuditLog(clock=system_clock).append_many(
            c,
            [{"kind": "step_started", "status": "ok", "actor": "t", "step": i} for i in range(50)],
        )
    assert seqs == list(range(4, 54))
    _fill(db, 2)
    assert _verify(db) == (True, None, None)
    with db.tx() as c:
        c.execute(text("UPDATE audit_log SET actor = 'x' WHERE seq = 30"))
    assert _verify(db)[1] == 30


def test_append_without_the_head_row_is_a_clear_error(db: Database) -> None:
    """A deleted head row stops appends with one named error, not a bare library exception, and
    the decision's transaction rolls back with it."""
    from countersign.audit import AuditHeadMissingError

    _fill(db, 2)
    with db.tx() as c:
        head = c.execute(text("SELECT seq, last_hash FROM audit_head WHERE id = 1")).one()
        c.execute(text("DELETE FROM audit_head"))
    try:
        log = AuditLog(clock=system_clock)
        for append in (
            lambda c: log.append(c, {"kind": "plan_signed", "status": "ok", "actor": "a"}),
            lambda c: log.append_many(c, [{"kind": "plan_signed", "status": "ok", "actor": "a"}]),
        ):
            with (
                pytest.raises(AuditHeadMissingError, match="audit_head row is missing"),
                db.tx() as c,
            ):
                append(c)
        with db.tx() as c:
            assert c.execute(text("SELECT count(*) FROM audit_log")).scalar_one() == 2
    finally:
        with db.tx() as c:
            c.execute(
                text("INSERT INTO audit_head (id, seq, last_hash) VALUES (1, :s, :h)"),
                {"s": head.seq, "h": head.last_hash},
            )


def test_a_row_edited_to_hold_an_unhashable_number_is_reported(db: Database) -> None:
    """jsonb gives 1e21 back as an integer beyond 2^53-1, which canonical JSON refuses: verify
    names that row as changed rather than raising."""
    _fill(db, 3)
    with db.tx() as c:
        c.execute(text("""UPDATE audit_log SET details = '{"x": 1e21}' WHERE seq = 2"""))
    ok, bad, why = _verify(db)
    assert not ok and bad == 2 and "changed" in (why or "")
