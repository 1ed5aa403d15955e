"""A gate has one decision, even under races (Approvals SPEC §3), on the real Postgres.

Each round races threads released together by a barrier; a random sub-millisecond delay before
each call varies the interleaving. Every round gets a fresh plan id, so rounds never share a gate.
After every round the test checks what must hold whatever the interleaving: exactly one decision
won, each loser got its distinct error and an audit row, and after a reject no token for the gate
(old, racing, or issued later) redeems.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from countersign.approvals import (
    Approvals,
    GateApprovedError,
    GateDecidedError,
    GateRejectedError,
    TokenReusedError,
    token_hash,
)
from countersign.audit import AuditLog
from countersign.kernel import system_clock
from countersign.storage import Database

H = "c" * 64
GATE = "gate-A"
_ids = itertools.count(1)


def _plan_id() -> str:
    return f"01RACE{next(_ids):020d}"


def _race(*calls: Callable[[], Any], jitter_s: float = 0.0005) -> list[Any]:
    """Run the calls at once; each result is the returned value or the raised exception."""
    barrier = threading.Barrier(len(calls))
    out: list[Any] = [None] * len(calls)
    delays = [random.uniform(0, jitter_s) for _ in calls]

    def run(i: int) -> None:
        barrier.wait()
        time.sleep(delays[i])
        try:
            out[i] = calls[i]()
        except Exception as e:  # the result under test
            out[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
        assert not t.is_alive(), "a racing call hung (deadlock?)"
    return out


class Gate:
    """One plan's gate-A and the calls on it."""

    def __init__(self, a: Approvals) -> None:
        self.a = a
        self.plan_id = _plan_id()

    def issue(self, user: str = "alice") -> str:
        return self.a.issue(
            plan_id=self.plan_id,
            plan_hash=H,
            gate_id=GATE,
            user_id=user,
            scopes=["calendar.write"],
            ttl_s=300,
            choice={"slot": user},
        ).token

    def redeem(self, token: str, user: str = "alice") -> Any:
        return self.a.redeem(
            token,
            plan_id=self.plan_id,
            plan_hash=H,
            gate_id=GATE,
            user_id=user,
            required_scopes=["calendar.write"],
        )

    def reject(self, user: str = "bob") -> str:
        self.a.reject(plan_id=self.plan_id, plan_hash=H, gate_id=GATE, user_id=user, reason="no")
        return "rejected"

    def audit(self, db: Database) -> list[tuple[str, str | None]]:
        with db.tx() as c:
            return [
                (r.kind, r.reason)
                for r in c.execute(
                    text("SELECT kind, reason FROM audit_log WHERE plan_id = :p ORDER BY seq"),
                    {"p": self.plan_id},
                )
            ]

    def consumed(self, db: Database, token: str) -> bool:
        with db.tx() as c:
            return (
                c.execute(
                    text("SELECT consumed_at FROM approval_tokens WHERE token_hash = :h"),
                    {"h": token_hash(token)},
                ).scalar_one()
                is not None
            )


def _assert_rejected_for_good(g: Gate, db: Database, tokens: list[str]) -> None:
    """After a reject: no token of the gate redeems, none is issued, nothing approved it."""
    d = g.a.decision(g.plan_id, GATE)
    assert d is not None and d.decision == "rejected"
    for token in tokens:
        with pytest.raises((GateRejectedError, TokenReusedError)):
            g.redeem(token)
    with pytest.raises(GateRejectedError):
        g.issue()
    assert ("gate_approved", None) not in g.audit(db)


def test_reject_races_redeem_exactly_one_wins(db: Database) -> None:
    a = Approvals(db, clock=system_clock)
    wins = {"redeem": 0, "reject": 0}
    for _ in range(150):
        g = Gate(a)
        token = g.issue()
        redeemed, rejected = _race(partial(g.redeem, token), g.reject)
        audit = g.audit(db)
        d = a.decision(g.plan_id, GATE)
        assert d is not None
        if rejected == "rejected":
            # the reject won: the redemption was refused, did not spend the token, and was audited
            assert isinstance(redeemed, GateRejectedError), redeemed
            assert d.decision == "rejected" and not g.consumed(db, token)
            assert ("token_refused", "gate_rejected") in audit
            assert [k for k, _ in audit].count("gate_rejected") == 1
            _assert_rejected_for_good(g, db, [token])
            wins["reject"] += 1
        else:
            # the redemption won: the reject was refused with its own error, audited
            assert isinstance(rejected, GateApprovedError), rejected
            assert redeemed.choice == {"slot": "alice"}
            assert d.decision == "approved" and g.consumed(db, token)
            assert ("gate_reject_refused", "gate_already_approved") in audit
            assert "gate_rejected" not in [k for k, _ in audit]
            wins["redeem"] += 1
    # both orders happened, so both branches above were checked (not only one kind of winner)
    assert wins["redeem"] and wins["reject"], wins
    with db.tx() as c:
        assert AuditLog(clock=system_clock).verify(c).ok


def test_approve_races_reject(db: Database) -> None:
    """The whole approval (issue then redeem, as a person approving does) against a reject."""
    a = Approvals(db, clock=system_clock)
    for _ in range(100):
        g = Gate(a)
        issued: list[str] = []

        def approve(g: Gate = g, issued: list[str] = issued) -> Any:
            issued.append(g.issue())
            return g.redeem(issued[-1])

        approved, rejected = _race(approve, g.reject)
        d = a.decision(g.plan_id, GATE)
        assert d is not None
        if rejected == "rejected":
            assert isinstance(approved, GateRejectedError), approved
            _assert_rejected_for_good(g, db, issued)
        else:
            assert isinstance(rejected, GateApprovedError) and d.decision == "approved"
            assert not isinstance(approved, Exception)


def test_issue_races_reject_token_never_redeems_after(db: Database) -> None:
    """An issue racing a reject either is refused, or its token is dead once the reject lands —
    and the audit shows them in the order they took effect."""
    a = Approvals(db, clock=system_clock)
    for _ in range(100):
        g = Gate(a)
        token, rejected = _race(g.issue, g.reject)
        assert rejected == "rejected"
        kinds = [k for k, _ in g.audit(db)]
        if isinstance(token, GateRejectedError):
            assert kinds == ["gate_rejected", "token_issue_refused"]
            _assert_rejected_for_good(g, db, [])
        else:
            assert isinstance(token, str) and kinds == ["token_issued", "gate_rejected"]
            _assert_rejected_for_good(g, db, [token])


def test_double_reject_one_wins_the_rest_audited(db: Database) -> None:
    a = Approvals(db, clock=system_clock)
    for _ in range(40):
        g = Gate(a)
        out = _race(*[partial(g.reject, f"u{i}") for i in range(6)])
        assert out.count("rejected") == 1, out
        losers = [o for o in out if o != "rejected"]
        assert all(isinstance(o, GateRejectedError) for o in losers), losers
        audit = g.audit(db)
        assert [k for k, _ in audit].count("gate_rejected") == 1
        assert audit.count(("gate_reject_refused", "gate_rejected")) == 5


def test_redeem_after_reject_and_reject_after_redeem(db: Database) -> None:
    a = Approvals(db, clock=system_clock)
    g = Gate(a)
    early = g.issue()
    g.reject()
    with pytest.raises(GateRejectedError, match=r"gate-A of plan 01RACE\d+.*rejected by bob"):
        g.redeem(early)
    assert not g.consumed(db, early)  # the refusal did not spend it
    _assert_rejected_for_good(g, db, [early])
    with pytest.raises(GateRejectedError, match="found it rejected by bob"):
        g.reject("carol")

    h = Gate(a)
    h.redeem(h.issue())
    with pytest.raises(GateApprovedError, match="found it approved by alice"):
        h.reject()
    # approved -> approved stays possible (a new execute spends a fresh token)
    assert h.redeem(h.issue()).choice == {"slot": "alice"}
    d = a.decision(h.plan_id, GATE)
    assert d is not None and d.decision == "approved"
    assert issubclass(GateApprovedError, GateDecidedError)
    assert GateApprovedError.code != GateRejectedError.code != GateDecidedError.code


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    redeemers=st.integers(1, 4),
    rejecters=st.integers(0, 3),
    issuers=st.integers(0, 2),
    jitter_us=st.integers(0, 3000),
    seed=st.integers(0, 2**16),
)
def test_many_way_race_one_decision(
    db: Database, redeemers: int, rejecters: int, issuers: int, jitter_us: int, seed: int
) -> None:
    """Any mix of redemptions (each its own token), rejects and fresh issues on one gate: either
    the gate is approved (redemptions may succeed, every reject is refused) or one reject won
    and no redemption succeeded; afterwards a rejected gate never approves."""
    random.seed(seed)
    a = Approvals(db, clock=system_clock)
    g = Gate(a)
    tokens = [g.issue() for _ in range(redeemers)]
    calls: list[Callable[[], Any]] = [partial(g.redeem, t) for t in tokens]
    calls += [partial(g.reject, f"r{i}") for i in range(rejecters)]
    calls += [g.issue for _ in range(issuers)]
    random.shuffle(calls)
    out = _race(*calls, jitter_s=jitter_us / 1e6)
    unexpected = [
        o for o in out if isinstance(o, Exception) and not isinstance(o, GateDecidedError)
    ]
    assert not unexpected, unexpected
    rejects_won = out.count("rejected")
    redeems_won = sum(1 for o in out if hasattr(o, "choice"))
    new_tokens = [o for o in out if isinstance(o, str) and o != "rejected"]
    d = a.decision(g.plan_id, GATE)
    if rejects_won:
        assert rejects_won == 1 and redeems_won == 0, out
        assert d is not None and d.decision == "rejected"
        _assert_rejected_for_good(g, db, tokens + new_tokens)
    else:
        assert redeems_won >= 1, out
        assert d is not None and d.decision == "approved"
        assert all(isinstance(o, GateApprovedError) for o in out if isinstance(o, Exception))
