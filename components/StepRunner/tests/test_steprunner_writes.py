"""The write protocol on the real Postgres ledger: every attempt a runtime can report lands in
exactly the ledger state ``classify`` gives it, and only a ``failed`` key is ever sent again."""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from countersign.audit import AuditLog
from countersign.kernel import system_clock
from countersign.steps import (
    Attempt,
    Replay,
    Ticket,
    WriteFailedError,
    WriteProtocol,
    classify,
    idempotency_key,
)
from countersign.storage import Database, IdempotencyLedger, InProgressError, OutcomeUnknownError

_ids = itertools.count(1)

attempts = st.one_of(
    st.builds(Attempt.not_sent, st.just("connect refused")),
    st.builds(Attempt.lost, st.sampled_from(["ReadTimeout", "n8n answered 500", "dropped"])),
    st.builds(lambda: Attempt("refused", detail="SMTP 550")),
    st.builds(
        lambda s: Attempt("answered", status=s, output={"id": "x", "status": s}),
        st.integers(min_value=100, max_value=599),
    ),
    st.builds(lambda: Attempt("answered", output={"id": "m1"})),
)


def test_classify_table() -> None:
    assert classify(Attempt.not_sent("x")) == "failed"
    assert classify(Attempt.lost("x")) == "unknown"
    assert classify(Attempt("refused")) == "failed"
    assert classify(Attempt("answered", status=201)) == "completed"
    assert classify(Attempt("answered", status=412)) == "failed"
    assert classify(Attempt("answered", status=412), natural_key=True) == "deduplicated"
    assert classify(Attempt("answered", status=404)) == "failed"
    for s in (500, 502, 503, 504, 302, 100):
        assert classify(Attempt("answered", status=s)) == "unknown"


@given(attempts, st.booleans())
def test_classify_never_calls_a_possible_effect_failed(a: Attempt, natural: bool) -> None:
    """``failed`` lets the key be sent again, so it may only mean: nothing happened."""
    verdict = classify(a, natural_key=natural)
    if verdict == "failed":
        assert a.kind in {"not_sent", "refused"} or (a.status is not None and 400 <= a.status < 500)
    if a.kind == "lost" or (a.status is not None and a.status >= 500):
        assert verdict == "unknown"


def _protocol(db: Database, rows: list[dict[str, Any]]) -> WriteProtocol:
    return WriteProtocol(
        IdempotencyLedger(db, audit=AuditLog(clock=system_clock), clock=system_clock),
        rows.append,
        owner="test-owner",
        clock=time.perf_counter,
    )


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(attempt=attempts, natural=st.booleans())
def test_settle_puts_the_key_where_classify_says(
    db: Database, attempt: Attempt, natural: bool
) -> None:
    rows: list[dict[str, Any]] = []
    writes = _protocol(db, rows)
    plan_id = f"01JDQ3Z0000000000000{next(_ids):06d}"
    args = {"n": 1}
    ticket = writes.claim(
        plan_id=plan_id, step=5, op="caldav.create_event", args=args, actor="a", natural_key=natural
    )
    assert isinstance(ticket, Ticket)
    writes.sending(ticket)
    verdict = classify(attempt, natural_key=natural)
    if verdict == "failed":
        with pytest.raises(WriteFailedError) as info:
            writes.settle(ticket, attempt)
        assert info.value.sent == (attempt.kind != "not_sent")
    elif verdict == "unknown":
        with pytest.raises(OutcomeUnknownError):
            writes.settle(ticket, attempt)
    else:
        done = writes.settle(ticket, attempt)
        assert done.verdict == verdict
    state = IdempotencyLedger(db, clock=system_clock, audit=AuditLog(clock=system_clock)).state(
        idempotency_key(plan_id, 5, args)
    )
    assert state is not None
    assert state["state"] == {"failed": "failed", "unknown": "unknown"}.get(verdict, "completed")
    assert next(r["kind"] for r in rows) == "step_started"
    assert rows[-1]["kind"] == {
        "failed": "step_failed",
        "unknown": "step_unknown",
    }.get(verdict, "step_finished")
    # what a later claim (a retry, a second execute, a double click) gets
    if verdict == "unknown":
        with pytest.raises(OutcomeUnknownError):
            writes.claim(plan_id=plan_id, step=5, op="caldav.create_event", args=args, actor="a")
    elif verdict == "failed":
        assert isinstance(
            writes.claim(plan_id=plan_id, step=5, op="caldav.create_event", args=args, actor="a"),
            Ticket,
        )
    else:
        again = writes.claim(
            plan_id=plan_id, step=5, op="caldav.create_event", args=args, actor="a"
        )
        assert isinstance(again, Replay) and again.result["output"] == attempt.output


def test_a_request_that_cannot_be_built_is_failed_not_unknown(db: Database) -> None:
    rows: list[dict[str, Any]] = []
    writes = _protocol(db, rows)
    plan_id = f"01JDQ3Z0000000000000{next(_ids):06d}"
    ticket = writes.claim(plan_id=plan_id, step=4, op="smtp.send", args={}, actor="a")
    assert isinstance(ticket, Ticket)
    err = writes.abandon(ticket, "connector setting 'smtp_host' is not configured")
    assert not err.sent
    state = IdempotencyLedger(db, clock=system_clock, audit=AuditLog(clock=system_clock)).state(
        ticket.key
    )
    assert state is not None and state["state"] == "failed"


def test_a_claim_and_its_started_row_commit_together(db: Database) -> None:
    """With ``audit_in`` (the executor's), the ``step_started`` row is written in the claiming
    transaction: an audit append that fails leaves no claimed key, and a claim that is refused
    (in progress) or answered from the ledger writes no row."""
    audit = AuditLog(clock=system_clock)
    ledger = IdempotencyLedger(db, audit=audit, clock=system_clock)
    written: list[dict[str, Any]] = []

    def failing(c: Any, row: dict[str, Any]) -> None:
        raise RuntimeError("audit append failed")

    def recording(c: Any, row: dict[str, Any]) -> int:
        written.append(row)
        return audit.append(c, row)

    plan_id = f"01JDQ3Z0000000000000{next(_ids):06d}"
    broken = WriteProtocol(
        ledger, written.append, owner="o1", clock=time.perf_counter, audit_in=failing
    )
    with pytest.raises(RuntimeError):
        broken.claim(plan_id=plan_id, step=5, op="caldav.create_event", args={"n": 1}, actor="a")
    assert ledger.state(idempotency_key(plan_id, 5, {"n": 1})) is None  # rolled back with it
    assert written == []

    writes = WriteProtocol(
        ledger, written.append, owner="o1", clock=time.perf_counter, audit_in=recording
    )
    ticket = writes.claim(
        plan_id=plan_id, step=5, op="caldav.create_event", args={"n": 1}, actor="a"
    )
    assert isinstance(ticket, Ticket)
    assert [r["kind"] for r in written] == ["step_started"]
    other = WriteProtocol(
        ledger, written.append, owner="o2", clock=time.perf_counter, audit_in=recording
    )
    with pytest.raises(InProgressError):
        other.claim(plan_id=plan_id, step=5, op="caldav.create_event", args={"n": 1}, actor="a")
    writes.sending(ticket)
    writes.settle(ticket, Attempt("answered", status=201, output={"status": 201}))
    assert isinstance(
        other.claim(plan_id=plan_id, step=5, op="caldav.create_event", args={"n": 1}, actor="a"),
        Replay,
    )
    assert [r["kind"] for r in written] == ["step_started", "step_finished"]
