"""Evidence selection (pure): tiers, consent, expiry, drops, ranking, the 2 KB cap."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import JsonValue

from countersign.contextrag import (
    MAX_EVIDENCE_BYTES,
    MemoryItem,
    history_items,
    pref_items,
    relevant_items,
    select_evidence,
)
from countersign.contextrag.sentences import spoken
from countersign.kernel import canonical_bytes

NOW = datetime(2026, 11, 25, 10, 0, tzinfo=UTC)


def _item(
    tier: str = "T2", key: str = "duration_min", value: JsonValue = 30, **kw: object
) -> MemoryItem:
    base: dict[str, object] = {
        "tier": tier,
        "type": "preference",
        "key": key,
        "value": value,
        "confidence": 0.9,
        "source_ref": f"fact:{tier}:{key}",
        "created_at": NOW - timedelta(days=1),
    }
    base |= kw
    return MemoryItem(**base)  # type: ignore[arg-type]


def test_t5_never_without_consent_and_present_with_it() -> None:
    private = _item("T5", "diet", "vegetarian", purpose="meal_planning")
    without = select_evidence([private], budget=5, now=NOW, consents=set())
    other = select_evidence([private], budget=5, now=NOW, consents={"shopping"})
    with_consent = select_evidence([private], budget=5, now=NOW, consents={"meal_planning"})
    assert without == [] and other == []
    assert [e.key for e in with_consent] == ["diet"]
    # consent given but the intent's budget stops below T5
    assert select_evidence([private], budget=4, now=NOW, consents={"meal_planning"}) == []
    # a T5 item with no purpose is never used
    assert select_evidence([_item("T5", "x", 1)], budget=5, now=NOW, consents={"x"}) == []


def test_budget_bounds_the_tiers() -> None:
    items = [_item(t, f"k{t[1]}", 1) for t in ("T1", "T2", "T3", "T4")]
    for budget in range(5):
        got = {e.key for e in select_evidence(items, budget=budget, now=NOW, consents=set())}
        assert got == {f"k{n}" for n in range(1, budget + 1) if n <= 4}


def test_expired_and_dropped_items_are_left_out() -> None:
    old = _item("T4", "location", "Lisbon", ttl_days=1, created_at=NOW - timedelta(days=2))
    fresh = _item("T4", "weather", "rain", ttl_days=1, created_at=NOW - timedelta(hours=2))
    dropped = _item("T2", "duration_min", 45)
    got = select_evidence(
        [old, fresh, dropped], budget=4, now=NOW, consents=set(), exclude={dropped.source_ref}
    )
    assert [e.key for e in got] == ["weather"]
    assert got[0].ttl_days == 1


def test_best_item_per_key_and_relevance_first() -> None:
    weak = _item("T3", "duration_min", 60, confidence=0.5, source_ref="pattern:a")
    strong = _item("T2", "duration_min", 30, confidence=0.9, source_ref="pref:x")
    other = _item("T2", "video_link", "https://meet.example/x", confidence=1.0)
    got = select_evidence(
        [weak, strong, other], budget=3, now=NOW, consents=set(), relevant={"duration_min"}
    )
    assert [(e.key, e.value) for e in got] == [("duration_min", 30), ("video_link", other.value)]


def test_history_becomes_outcomes_and_a_pattern() -> None:
    rows = [
        {
            "plan_id": f"P{i:025d}",
            "step": 3,
            "intent": "schedule_meeting",
            "key": "duration_min",
            "value": 30 if i < 4 else 60,
            "status": "created",
            "created_at": NOW - timedelta(days=i),
        }
        for i in range(5)
    ]
    items = history_items(rows, "schedule_meeting")
    pattern = [i for i in items if i.type == "preference"]
    assert len(pattern) == 1 and pattern[0].value == 30 and pattern[0].confidence == 0.8
    # one history item per key: the newest run's value, how the runs went (counted per run)
    (hist,) = [i for i in items if i.type == "history"]
    assert hist.value == 30 and hist.source_ref == "history:schedule_meeting:duration_min"
    assert hist.why == (
        "5 of your last 5 schedule meeting runs succeeded; the latest, on 25 Nov 2026, "
        "had duration min 30."
    )
    assert history_items(rows, "purchase_item") == []


def test_preference_aliases_name_the_entity() -> None:
    items = pref_items(
        {"default_meeting_length": (30, NOW), "work_hours": ({"start": "09:00"}, NOW)}
    )
    assert {i.key for i in items} == {"duration_min", "work_hours"}


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(max_size=300),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=20), inner, max_size=5)
    ),
    max_leaves=30,
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["T1", "T2", "T3", "T4", "T5"]),
            st.text(st.characters(min_codepoint=32), min_size=1, max_size=200),
            _json,
            st.floats(0, 1),
            st.text(min_size=1, max_size=300),
            st.one_of(st.none(), st.integers(1, 400)),
            st.integers(0, 1000),
        ),
        max_size=60,
    ),
    st.integers(0, 5),
)
def test_evidence_stays_within_2kb_for_any_input(items: list[tuple], budget: int) -> None:  # type: ignore[type-arg]
    mem = [
        MemoryItem(tier, "preference", key, value, conf, ref, NOW - timedelta(days=age), ttl, "p")
        for tier, key, value, conf, ref, ttl, age in items
    ]
    got = select_evidence(mem, budget=budget, now=NOW, consents={"p"})
    assert len(canonical_bytes([e.to_json() for e in got])) <= MAX_EVIDENCE_BYTES
    assert len({(e.type, e.key) for e in got}) == len(got)
    # every item says in a sentence why it is there, in words, never as JSON
    assert all(e.why and "{" not in e.why and "}" not in e.why for e in got)


def test_a_pattern_counts_runs_not_steps() -> None:
    """One run of five steps that each recorded the key is one run, not five."""
    rows = [
        {
            "plan_id": "P" + "0" * 25,
            "step": step,
            "intent": "schedule_meeting",
            "key": "duration_min",
            "value": 45,
            "status": "ok",
            "created_at": NOW - timedelta(days=1),
        }
        for step in range(1, 6)
    ] + [
        {
            "plan_id": "P" + "1" * 25,
            "step": 1,
            "intent": "schedule_meeting",
            "key": "duration_min",
            "value": 30,
            "status": "ok",
            "created_at": NOW - timedelta(days=2),
        }
    ]
    (pattern,) = [i for i in history_items(rows, "schedule_meeting") if i.type == "preference"]
    # two runs, one each: a tie broken by the newest; 1 of 2 runs, discounted below five runs
    assert pattern.value == 45 and pattern.confidence == round(0.5 * 2 / 5, 3)
    assert pattern.why == (
        "Duration min was 45 in 1 of your last 2 successful schedule meeting runs."
    )
    # a failed run counts once as a failure, however many of its steps failed
    failed = [
        {
            **rows[0],
            "plan_id": "P" + "2" * 25,
            "step": s,
            "status": "failed",
            "key": "outcome",
            "value": {"op": "caldav.create_event"},
        }
        for s in (1, 2, 3)
    ]
    ok = [{**rows[-1], "key": "outcome", "value": {"op": "smtp.send"}}]
    (hist,) = [i for i in history_items(failed + ok, "schedule_meeting") if i.type == "history"]
    assert hist.why == (
        "1 of your last 2 schedule meeting runs succeeded; the latest, on 24 Nov 2026, "
        "ran caldav.create_event."
    )


def _kinds() -> list[MemoryItem]:
    return [
        _item("T2", "duration_min", 30, why="You set duration min to 30."),
        _item("T2", "diet", "vegetarian"),
        _item("T2", "work_hours", {"start": "09:00", "end": "17:00"}),
        _item("T2", "Bob", {"email": "bob@example.com"}, type="contact", source_ref="c:bob"),
        _item("T2", "Eve", {"email": "eve@example.com"}, type="contact", source_ref="c:eve"),
        _item("T2", "Carol", "Carol", type="contact", source_ref="c:carol"),
        _item("T3", "schedule_meeting.outcome", {"op": "caldav.create_event"}, type="history"),
        _item("T3", "book_visa_slot.outcome", {"op": "visa.book"}, type="history"),
        _item("T3", "P1", {"intent": "schedule_meeting"}, type="exemplar", source_ref="pl:1"),
        _item("T3", "P2", {"intent": "book_visa_slot"}, type="exemplar", source_ref="pl:2"),
    ]


def test_only_evidence_relevant_to_the_intent() -> None:
    keep = relevant_items(
        _kinds(),
        intent="schedule_meeting",
        names={"duration_min", "attendees", "title", "window_start"},
        entities={"attendees": ["bob@example.com"], "title": "Sync with Carol"},
    )
    assert [(i.type, i.key) for i in keep] == [
        ("preference", "duration_min"),
        ("preference", "work_hours"),  # it bounds window_start (the planner reads it)
        ("contact", "Bob"),  # by e-mail
        ("contact", "Carol"),  # by name, a word of the title
        ("history", "schedule_meeting.outcome"),
        ("exemplar", "P1"),
    ]
    visa = relevant_items(
        _kinds(), intent="book_visa_slot", names={"consulate"}, entities={"consulate": "lisbon"}
    )
    assert [(i.type, i.key) for i in visa] == [
        ("history", "book_visa_slot.outcome"),
        ("exemplar", "P2"),
    ]


def test_each_item_gets_a_sentence_and_readable_values() -> None:
    got = select_evidence(_kinds(), budget=5, now=NOW, consents=set())
    assert len(got) == len(_kinds())
    for e in got:
        assert e.why and e.why.endswith(".") and "{" not in e.why and "[" not in e.why
    assert {e.key: e.why for e in got}["duration_min"] == "You set duration min to 30."
    assert spoken({"email": "bob@example.com", "tags": ["a", "b"], "ok": True}) == (
        "email bob@example.com; tags a, b; ok yes"
    )
    assert spoken("{not json}") == "(not json)" and len(spoken("x" * 500)) == 90
    assert spoken({"end": "17:00", "start": "09:00"}) == "09:00–17:00"
