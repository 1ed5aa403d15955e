"""Approval tokens on the real Postgres: single use under concurrency, binding, expiry, audit."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from countersign.approvals import (
    ApprovalError,
    Approvals,
    GateDecidedError,
    GateRejectedError,
    TokenExpiredError,
    TokenGateMismatchError,
    TokenPlanMismatchError,
    TokenReusedError,
    TokenScopeError,
    TokenUnknownError,
    TokenUserMismatchError,
    token_hash,
)
from countersign.audit import AuditLog
from countersign.kernel import InputError, system_clock
from countersign.storage import Database

PLAN = "01JDQ3Z0000000000000000001"
H1, H2 = "a" * 64, "b" * 64


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def _issue(a: Approvals, **kw: Any) -> str:
    args: dict[str, Any] = {
        "plan_id": PLAN,
        "plan_hash": H1,
        "gate_id": "gate-A",
        "user_id": "alice",
        "scopes": ["calendar.write"],
        "ttl_s": 300,
        "choice": {"start": "S"},
    }
    args.update(kw)
    return a.issue(**args).token


def _redeem(a: Approvals, token: str, **kw: Any) -> Any:
    args: dict[str, Any] = {
        "plan_id": PLAN,
        "plan_hash": H1,
        "gate_id": "gate-A",
        "user_id": "alice",
        "required_scopes": ["calendar.write"],
    }
    args.update(kw)
    return a.redeem(token, **args)


def test_fifty_concurrent_redemptions_one_success(db: Database) -> None:
    a = Approvals(db, clock=system_clock)
    token = _issue(a)
    barrier = threading.Barrier(50)
    results: list[str] = []
    lock = threading.Lock()

    def go() -> None:
        barrier.wait()
        try:
            _redeem(a, token)
            out = "ok"
        except TokenReusedError:
            out = "reused"
        with lock:
            results.append(out)

    threads = [threading.Thread(target=go) for _ in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count("ok") == 1 and results.count("reused") == 49
    with db.tx() as c:
        kinds = [r.kind for r in c.execute(text("SELECT kind FROM audit_log ORDER BY seq"))]
        assert kinds.count("gate_approved") == 1 and kinds.count("token_refused") == 49
        assert AuditLog(clock=system_clock).verify(c).ok


@pytest.mark.parametrize(
    ("override", "error"),
    [
        ({"plan_hash": H2}, TokenPlanMismatchError),
        ({"gate_id": "gate-B"}, TokenGateMismatchError),
        ({"user_id": "mallory"}, TokenUserMismatchError),
        ({"required_scopes": ["calendar.write", "mail.send"]}, TokenScopeError),
    ],
)
def test_binding_refusals_each_distinct_and_audited(
    db: Database, override: dict[str, Any], error: type[ApprovalError]
) -> None:
    a = Approvals(db, clock=system_clock)
    token = _issue(a)
    with pytest.raises(error):
        _redeem(a, token, **override)
    # the refusal did not spend the token: the right redemption still works
    assert _redeem(a, token).choice == {"start": "S"}
    with db.tx() as c:
        row = c.execute(text("SELECT reason FROM audit_log WHERE kind = 'token_refused'")).one()
        assert row.reason == error.code


def test_unknown_reused_expired(db: Database) -> None:
    clock = Clock()
    a = Approvals(db, clock=clock)
    with pytest.raises(TokenUnknownError):
        _redeem(a, "cst_" + "x" * 43)
    token = _issue(a)
    _redeem(a, token)
    with pytest.raises(TokenReusedError):
        _redeem(a, token)
    late = _issue(a, ttl_s=60)
    clock.now += timedelta(seconds=61)
    with pytest.raises(TokenExpiredError):
        _redeem(a, late)


def test_token_is_stored_only_as_hash(db: Database) -> None:
    a = Approvals(db, clock=system_clock)
    token = _issue(a)
    with db.tx() as c:
        dump = " ".join(str(r) for r in c.execute(text("SELECT * FROM approval_tokens")).all())
        dump += " ".join(str(r) for r in c.execute(text("SELECT * FROM audit_log")).all())
    assert token not in dump and token[4:] not in dump


def test_rejected_gate_stays_rejected(db: Database) -> None:
    a = Approvals(db, clock=system_clock)
    token = _issue(a)
    a.reject(plan_id=PLAN, plan_hash=H1, gate_id="gate-A", user_id="alice", reason="not this week")
    with pytest.raises(GateDecidedError):
        _redeem(a, token)
    with pytest.raises(GateDecidedError):
        _issue(a)
    with pytest.raises(GateDecidedError):
        a.reject(plan_id=PLAN, plan_hash=H1, gate_id="gate-A", user_id="alice")
    d = a.decision(PLAN, "gate-A")
    assert d is not None and d.decision == "rejected" and d.reason == "not this week"


@pytest.mark.parametrize(
    "override",
    [{"plan_id": "short"}, {"plan_hash": "XYZ"}, {"gate_id": "A"}, {"user_id": ""}, {"ttl_s": 0}],
)
def test_bad_input_leaves_no_rows(db: Database, override: dict[str, Any]) -> None:
    with pytest.raises(InputError):
        _issue(Approvals(db, clock=system_clock), **override)
    with db.tx() as c:
        assert c.execute(text("SELECT count(*) FROM approval_tokens")).scalar() == 0
        assert c.execute(text("SELECT count(*) FROM audit_log")).scalar() == 0


def test_a_token_lives_no_longer_than_the_policy_or_the_plan(db: Database) -> None:
    """Policy.approval_ttl_s and the plan's own expiry bound every token (issue 10, hole 4:
    both were stored, neither was checked)."""
    t0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
    now = [t0]
    a = Approvals(db, clock=lambda: now[0], max_ttl_s=120)
    with pytest.raises(InputError, match="exceeds the policy's approval_ttl_s 120"):
        _issue(a, ttl_s=121)
    with pytest.raises(InputError, match="expired"):
        _issue(a, ttl_s=60, not_after=t0)
    # the plan expires in 30 s: a 120 s token still ends with the plan
    token = _issue(a, ttl_s=120, not_after=t0 + timedelta(seconds=30))
    now[0] = t0 + timedelta(seconds=31)
    with pytest.raises(TokenExpiredError):
        _redeem(a, token)
    with db.tx() as c:
        assert c.execute(text("SELECT count(*) FROM approval_tokens")).scalar_one() == 1


def test_a_redeemed_approval_is_confirmed_by_its_token_hash_only(db: Database) -> None:
    """What a workflow gets instead of the token (SPEC §3a): the token's hash stands for the
    approval only once the token was spent, for exactly its plan hash, gate and user, within its
    lifetime, while the gate is that person's approval; every refusal is audited."""
    clock = Clock()
    a = Approvals(db, clock=clock)
    token = _issue(a, ttl_s=60)
    ref = token_hash(token)
    keys: dict[str, Any] = {"plan_id": PLAN, "plan_hash": H1, "gate_id": "gate-A"}
    with pytest.raises(TokenUnknownError, match="not redeemed"):  # unspent: proves nothing
        a.redeemed(ref, user_id="alice", **keys)
    _redeem(a, token)
    assert a.redeemed(ref, user_id="alice", **keys).choice == {"start": "S"}
    with pytest.raises(TokenUserMismatchError):
        a.redeemed(ref, user_id="mallory", **keys)
    with pytest.raises(TokenPlanMismatchError):
        a.redeemed(ref, user_id="alice", **{**keys, "plan_hash": H2})
    with pytest.raises(TokenGateMismatchError):
        a.redeemed(ref, user_id="alice", **{**keys, "gate_id": "gate-B"})
    with pytest.raises(TokenUnknownError):
        a.redeemed("0" * 64, user_id="alice", **keys)
    with pytest.raises(InputError, match="64 hex"):
        a.redeemed(token, user_id="alice", **keys)  # the token itself is not a reference
    clock.now += timedelta(seconds=61)
    with pytest.raises(TokenExpiredError, match="reached the run after"):
        a.redeemed(ref, user_id="alice", **keys)
    with db.tx() as c:
        reasons = [
            r.reason
            for r in c.execute(
                text("SELECT reason FROM audit_log WHERE kind = 'token_refused' ORDER BY seq")
            )
        ]
    assert reasons == [
        "token_unknown",
        "token_wrong_user",
        "token_wrong_plan",
        "token_wrong_gate",
        "token_unknown",
        "token_expired",
    ]
    # a gate rejected: its tokens never redeem, so their hashes never stand for an approval
    clock.now -= timedelta(seconds=61)
    b = _issue(a, gate_id="gate-B")
    a.reject(plan_id=PLAN, plan_hash=H1, gate_id="gate-B", user_id="alice")
    with pytest.raises(GateRejectedError):
        _redeem(a, b, gate_id="gate-B")
    with pytest.raises(TokenUnknownError, match="not redeemed"):
        a.redeemed(token_hash(b), user_id="alice", **{**keys, "gate_id": "gate-B"})
