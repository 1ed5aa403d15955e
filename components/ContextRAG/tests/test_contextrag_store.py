"""The memory store on the real Postgres: history idempotency, prefs and consent, consent-gated
T5 evidence, expiry in SQL, and forget keeping the audit chain verifiable."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from countersign.audit import AuditLog
from countersign.contextrag import MemoryStore, record_history
from countersign.kernel import ContractError, Evidence, InputError, Intent
from countersign.storage import Database

NOW = datetime(2026, 11, 25, 10, 0, tzinfo=UTC)
PID = "01JDR8Z9Y0000000000000000A"


def _intent(budget: int, user: str = "alice") -> Intent:
    return Intent(
        intent="schedule_meeting",
        intent_id="01JDR8Z9Y0000000000000000B",
        received_at=NOW,
        user_id=user,
        entities={"title": "sync", "attendees": ["carol@example.com"]},
        context_budget=budget,
    )


#: the entities the registry's schedule_meeting (of these tests) has besides the given ones
NAMES = {"diet", "duration_min", "location"}


def _store(db: Database) -> MemoryStore:
    return MemoryStore(db, clock=lambda: NOW)


def test_record_history_is_idempotent(db: Database) -> None:
    kw = dict(
        user_id="alice",
        plan_id=PID,
        step=3,
        intent="schedule_meeting",
        key="duration_min",
        value=30,
        status="created",
        at=NOW,
    )
    assert record_history(db.engine, **kw) is True  # type: ignore[arg-type]
    assert record_history(db.engine, **kw) is False  # type: ignore[arg-type]
    with db.tx() as c:
        assert record_history(c, **{**kw, "key": "title"}) is True  # type: ignore[arg-type]
    assert db.scalar("SELECT count(*) FROM history_facts") == 2
    with pytest.raises(InputError, match="status"):
        record_history(db.engine, **{**kw, "status": "weird"})  # type: ignore[arg-type]


def test_prefs_and_consent_round_trip_and_validation(db: Database) -> None:
    m = _store(db)
    out = m.put_prefs(
        "alice",
        {
            "prefs": {"default_meeting_length": 30, "video_link": "x"},
            "consent": {"mail_insights": True},
        },
    )
    assert out == {
        "prefs": {"default_meeting_length": 30, "video_link": "x"},
        "consent": {"mail_insights": True},
    }
    out = m.put_prefs("alice", {"prefs": {"video_link": None}, "consent": {"mail_insights": False}})
    assert out == {"prefs": {"default_meeting_length": 30}, "consent": {"mail_insights": False}}
    assert m.prefs("bob") == {"prefs": {}, "consent": {}}
    with pytest.raises(ContractError, match="preference key"):
        m.put_prefs("alice", {"prefs": {"Bad Key": 1}})
    with pytest.raises(ContractError, match="at most 512"):
        m.put_prefs("alice", {"prefs": {"blob": "x" * 600}})
    with pytest.raises(ContractError, match="consent purpose"):
        m.add("alice", {"facts": [{"tier": "T5", "key": "diet", "value": "veg"}]})
    with pytest.raises(ContractError, match="derived scalar"):
        m.add(
            "alice",
            {
                "facts": [
                    {
                        "tier": "T5",
                        "key": "mail",
                        "value": {"body": "..."},
                        "purpose": "mail_insights",
                    }
                ]
            },
        )


def test_t5_evidence_only_with_recorded_consent(db: Database) -> None:
    m = _store(db)
    m.add(
        "alice",
        {
            "facts": [
                {
                    "tier": "T5",
                    "type": "preference",
                    "key": "diet",
                    "value": "vegetarian",
                    "purpose": "meal_planning",
                    "confidence": 0.9,
                }
            ]
        },
    )
    assert m.evidence(_intent(5), relevant=NAMES) == []
    m.put_prefs("alice", {"consent": {"meal_planning": True}})
    (diet,) = m.evidence(_intent(5), relevant=NAMES)
    assert diet.key == "diet"
    assert diet.why == (
        "You told Countersign your diet is vegetarian (25 Nov 2026, used because you allowed "
        "meal planning)."
    )
    assert m.evidence(_intent(5)) == []  # not an entity of this intent: not evidence for it
    assert m.evidence(_intent(4), relevant=NAMES) == []  # the budget stops below T5
    assert m.evidence(_intent(5, user="bob"), relevant=NAMES) == []  # another person's
    m.put_prefs("alice", {"consent": {"meal_planning": False}})
    assert m.evidence(_intent(5), relevant=NAMES) == []


def test_tiers_from_the_store_and_expiry(db: Database) -> None:
    m = _store(db)
    m.put_prefs("alice", {"prefs": {"default_meeting_length": 45}})
    m.add(
        "alice",
        {
            "facts": [{"tier": "T4", "key": "location", "value": "Lisbon", "ttl_days": 1}],
            "contacts": [{"name": "Carol", "email": "carol@example.com"}],
        },
    )
    for i in range(5):
        record_history(
            db.engine,
            user_id="alice",
            plan_id=f"{PID[:-1]}{i}",
            step=1,
            intent="schedule_meeting",
            key="duration_min",
            value=30,
            status="created",
            at=NOW - timedelta(days=i + 1),
        )
    got = m.evidence(_intent(4), relevant=NAMES)
    keys = {(e.type, e.key) for e in got}
    assert {
        ("preference", "duration_min"),
        ("preference", "location"),
        ("contact", "Carol"),
        ("history", "schedule_meeting.duration_min"),
    } <= keys
    whys = {e.key: e.why for e in got}
    assert whys["Carol"] == "Carol is in your contacts (carol@example.com)."
    assert whys["duration_min"] == (
        "You set default meeting length to 45 (your preference, set 25 Nov 2026)."
    )
    assert all(e.why and "{" not in e.why for e in got)
    assert m.evidence(_intent(1), relevant=NAMES) == []
    later = _intent(4).model_copy(update={"received_at": NOW + timedelta(days=2)})
    assert "location" not in {e.key for e in m.evidence(later, relevant=NAMES)}
    # the person drops the profile preference: the history pattern (30) is what remains
    ev = m.evidence(_intent(3), exclude={"pref:default_meeting_length"}, relevant=NAMES)
    (pattern,) = [e for e in ev if e.key == "duration_min"]
    assert pattern.value == 30
    assert pattern.why == (
        "Duration min was 30 in 5 of your last 5 successful schedule meeting runs."
    )
    # a contact the intent does not name, a preference no entity uses: not evidence
    other = _intent(4).model_copy(update={"entities": {"title": "sync"}})
    assert {e.type for e in m.evidence(other)} == {"history"}


def test_forget_redacts_the_audit_chain_which_still_verifies(db: Database) -> None:
    m, audit = _store(db), AuditLog(clock=lambda: NOW)
    with db.tx() as c:
        for kind in ("plan_signed", "preview_run"):
            audit.append(
                c,
                {
                    "kind": kind,
                    "status": "ok",
                    "actor": "alice",
                    "plan_id": PID,
                    "details": {"note": "alice@example.com"},
                },
            )
        audit.append(c, {"kind": "plan_signed", "status": "ok", "actor": "bob"})
    m.put_prefs("alice", {"prefs": {"video_link": "https://meet.example/alice"}})
    out = m.forget("alice", {"all": True}, audit=audit)
    assert (
        out["deleted"] == {"plan_events": 2, "profile_prefs": 1} and out["audit_rows_redacted"] == 2
    )
    with db.tx() as c:
        assert audit.verify(c).ok
        rows = c.execute(text("SELECT * FROM audit_log ORDER BY seq")).mappings().all()
        assert [r["actor"] for r in rows] == ["forgotten", "forgotten", "bob", "system:memory"]
        assert "alice" not in str([dict(r) for r in rows])
        # a row marked redacted that no forget names: the chain reports it
        c.execute(text("UPDATE audit_log SET redacted = true, actor = 'x' WHERE seq = 3"))
        report = audit.verify(c)
        assert not report.ok and report.first_bad_seq == 3
    with pytest.raises(ContractError, match="either"):
        m.forget("alice", {"all": True, "subject": "carol"}, audit=audit)
    with pytest.raises(ContractError):
        m.forget("alice", {"subject": "ab"}, audit=audit)


class _Library:
    def __init__(self) -> None:
        self.asked: list[int] = []

    def exemplars(self, intent: Intent, *, limit: int) -> list[Evidence]:
        self.asked.append(limit)
        return [
            Evidence(
                type="exemplar",
                key="schedule_meeting",
                value={"intent": "schedule_meeting", "score": 0.9},
                confidence=0.7,
                source_ref=f"plan:{PID}",
                why="A schedule meeting plan like this one ran yesterday and succeeded.",
            ),
            Evidence(
                type="exemplar",
                key="book_visa_slot",
                value={"intent": "book_visa_slot", "score": 0.99},
                confidence=0.99,
                source_ref="plan:other",
            ),
        ]


def test_exemplars_come_from_the_source_from_tier_3(db: Database) -> None:
    lib = _Library()
    m = MemoryStore(db, clock=lambda: NOW, exemplars=lib)
    assert m.evidence(_intent(2)) == [] and lib.asked == []
    got = m.evidence(_intent(3))
    # the source's plan of another intent is never evidence for this one
    assert [(e.type, e.source_ref) for e in got] == [("exemplar", f"plan:{PID}")]
    assert got[0].why == "A schedule meeting plan like this one ran yesterday and succeeded."
    assert m.evidence(_intent(3), exclude={f"plan:{PID}"}) == []


def test_every_contact_when_asked_not_the_newest_500(db: Database) -> None:
    """The gate rules' ``contacts`` set (read with ``limit=None`` by the API and the worker) holds
    a person's oldest contacts too: the chat's default window is the newest 500."""
    store = _store(db)
    people = [{"name": f"P{i}", "email": f"p{i}@example.com"} for i in range(501)]
    for i in range(0, len(people), 100):  # a write holds at most 100
        store.add("dora", {"contacts": people[i : i + 100]})
    assert len(store.contacts("dora")) == 500
    every = {mail for _, mail in store.contacts("dora", limit=None)}
    assert every == {p["email"] for p in people}
