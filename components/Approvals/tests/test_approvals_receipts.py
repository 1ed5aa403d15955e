"""Choice hashes and signed receipts on the real Postgres (Approvals SPEC §2, §4)."""

from __future__ import annotations

import json
import os
import threading
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from countersign.approvals import (
    NULL_CHOICE_HASH,
    Approvals,
    GateRejectedError,
    TokenChoiceMismatchError,
)
from countersign.audit import AuditLog
from countersign.kernel import InputError, content_hash, system_clock
from countersign.signer import KeyRing, ReceiptKeySigner, receipt_hash
from countersign.storage import Database

PLAN = "01JDQ3Z0000000000000000001"
H1 = "a" * 64
RING = KeyRing.from_seed(
    os.urandom(32), pubkey_id="k1", created_at=datetime(2026, 1, 1, tzinfo=UTC)
)
HC = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


def _approvals(db: Database) -> Approvals:
    return Approvals(db, clock=system_clock, receipts=ReceiptKeySigner(RING))


def _issue(a: Approvals, gate: str = "gate-A", choice: Any = None, plan: str = PLAN) -> str:
    return a.issue(
        plan_id=plan,
        plan_hash=H1,
        gate_id=gate,
        user_id="alice",
        scopes=["shop.write"],
        ttl_s=300,
        choice=choice,
    ).token


def _rows(db: Database, plan: str = PLAN) -> list[Any]:
    with db.tx() as c:
        return list(
            c.execute(
                text("SELECT * FROM gate_receipts WHERE plan_id = :p ORDER BY seq"), {"p": plan}
            )
        )


def _assert_chain(db: Database, plan: str = PLAN) -> list[dict[str, Any]]:
    """seq 1..n, each linked to the one before, signatures by k1, hashes as stored, anchored."""
    chain = _approvals(db).receipt_chain(plan)
    previous = None
    for i, (entry, row) in enumerate(zip(chain, _rows(db, plan), strict=True), 1):
        r = entry["receipt"]
        assert r["seq"] == row.seq == i
        assert r["previous_receipt_hash"] == previous
        assert receipt_hash(entry) == row.receipt_hash
        previous = row.receipt_hash
    with db.tx() as c:
        anchored = set(
            c.execute(
                text(
                    "SELECT details->>'receipt_hash' FROM audit_log "
                    "WHERE kind = 'receipt_signed' AND plan_id = :p"
                ),
                {"p": plan},
            ).scalars()
        )
        assert AuditLog(clock=system_clock).verify(c).ok
    assert anchored == {row.receipt_hash for row in _rows(db, plan)}
    return chain


def test_every_decision_is_a_signed_linked_anchored_receipt(db: Database) -> None:
    a = _approvals(db)
    t1 = _issue(a, "gate-A", {"item": "cable-b"})
    _issue(a, "gate-A", {"item": "cable-a"})
    a.reject(plan_id=PLAN, plan_hash=H1, gate_id="gate-B", user_id="alice", reason="too dear")
    with pytest.raises(GateRejectedError):  # refused: decides nothing, signs nothing
        _issue(a, "gate-B")
    redeemed = a.redeem(
        t1, plan_id=PLAN, plan_hash=H1, gate_id="gate-A", user_id="alice", required_scopes=[]
    )
    assert redeemed.choice_hash == content_hash({"item": "cable-b"})
    decision = a.decision(PLAN, "gate-A")
    assert decision is not None and decision.choice_hash == redeemed.choice_hash
    rejected = a.decision(PLAN, "gate-B")
    assert rejected is not None and rejected.choice_hash == NULL_CHOICE_HASH == content_hash(None)
    chain = _assert_chain(db)
    assert [(e["receipt"]["gate_id"], e["receipt"]["decision"]) for e in chain] == [
        ("gate-A", "approved"),
        ("gate-A", "approved"),
        ("gate-B", "rejected"),
    ]  # redemption writes no receipt: the approval was receipted when it was given
    first, _, third = (e["receipt"] for e in chain)
    assert first["choice_hash"] == content_hash({"item": "cable-b"})
    with db.tx() as c:
        ref = c.execute(
            text("SELECT left(token_hash, 12) FROM approval_tokens WHERE choice_hash = :h"),
            {"h": first["choice_hash"]},
        ).scalar_one()
    assert first["token_id"] == ref and first["user_id"] == "alice"
    assert third["token_id"] is None and third["choice_hash"] == NULL_CHOICE_HASH
    assert first["decided_at"].endswith("Z") and len(first["decided_at"]) == 24
    assert chain[0]["signature"]["pubkey_id"] == "k1"


@settings(max_examples=25, deadline=None, suppress_health_check=HC)
@given(
    choice=st.recursive(
        st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(max_size=8),
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
        ),
        max_leaves=8,
    ).filter(lambda v: "\\u0000" not in json.dumps(v))  # (repr escapes NUL: it never matched)
)
def test_the_choice_hash_survives_the_database(db: Database, choice: Any) -> None:
    """Whatever JSON choice is approved, the stored hash is the hash of what comes back."""
    a = Approvals(db, clock=system_clock)
    token = _issue(a, choice=choice, plan=PLAN)
    r = a.redeem(
        token, plan_id=PLAN, plan_hash=H1, gate_id="gate-A", user_id="alice", required_scopes=[]
    )
    assert r.choice_hash == content_hash(choice) and content_hash(r.choice) == r.choice_hash


def test_a_choice_the_database_would_change_is_refused(db: Database) -> None:
    a = _approvals(db)
    for nul in ({"\x00": 1}, {"item": "a\x00b"}, ["\x00"]):  # jsonb holds no NUL, key or value
        with pytest.raises(InputError, match="NUL"):
            _issue(a, choice=nul)
    with pytest.raises(InputError, match="read back"):
        _issue(a, choice={"n": 1e300})  # jsonb keeps the digits; reads back as an int
    with pytest.raises(InputError):
        _issue(a, choice={"n": 2**60})  # canonical JSON refuses it before any SQL
    assert _rows(db) == []


@pytest.mark.parametrize(
    "edit",
    [
        'UPDATE approval_tokens SET choice = \'{"item": "cable-x"}\'',
        "UPDATE approval_tokens SET choice = 'null'",
        "UPDATE approval_tokens SET choice_hash = repeat('0', 64)",
    ],
)
def test_a_tampered_choice_is_refused_unspent_and_audited(db: Database, edit: str) -> None:
    a = _approvals(db)
    token = _issue(a, "gate-A", {"item": "cable-a"})
    with db.tx() as c:
        c.execute(text(edit))
    with pytest.raises(TokenChoiceMismatchError, match=r"gate-A .*was not spent"):
        a.redeem(
            token, plan_id=PLAN, plan_hash=H1, gate_id="gate-A", user_id="alice", required_scopes=[]
        )
    with db.tx() as c:
        assert c.execute(text("SELECT consumed_at FROM approval_tokens")).scalar_one() is None
        assert c.execute(text("SELECT count(*) FROM gate_decisions")).scalar_one() == 0
        refused = c.execute(
            text("SELECT reason FROM audit_log WHERE kind = 'token_refused'")
        ).scalars()
        assert list(refused) == ["token_choice_mismatch"]
        assert AuditLog(clock=system_clock).verify(c).ok
    assert a.decision(PLAN, "gate-A") is None


def test_concurrent_decisions_on_one_plan_keep_one_chain(db: Database) -> None:
    """Approvals and rejections of several gates of one plan, from threads: seq has no gap or
    duplicate, every link holds, every receipt is anchored once."""
    a = _approvals(db)
    gates = ["gate-A", "gate-B", "gate-C", "gate-D"]
    barrier = threading.Barrier(12)
    errors: list[BaseException] = []

    def decide(i: int) -> None:
        barrier.wait()
        try:
            gate = gates[i % len(gates)]
            if i >= 8:
                a.reject(plan_id=PLAN, plan_hash=H1, gate_id=gate, user_id="alice")
            else:
                _issue(a, gate, {"n": i})
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=decide, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # an issue that lost to its gate's reject is refused (and signs nothing): that is all
    assert all(isinstance(e, GateRejectedError) for e in errors), errors
    chain = _assert_chain(db)
    assert len(chain) == 12 - len(errors)
    assert sum(e["receipt"]["decision"] == "rejected" for e in chain) == 4


def test_without_a_signer_nothing_is_signed(db: Database) -> None:
    a = Approvals(db, clock=system_clock)
    _issue(a)
    a.reject(plan_id=PLAN, plan_hash=H1, gate_id="gate-B", user_id="alice")
    assert _rows(db) == [] and a.receipt_chain(PLAN) == []
