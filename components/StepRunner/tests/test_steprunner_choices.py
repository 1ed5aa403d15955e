"""A gate accepts only a choice the preview offered (ARCHITECTURE §3 inv. 3): tables of variants
per gate kind of every use case, and generated choices that must be refused unless offered."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from countersign.kernel import Evidence, Intent, Plan, Policy, source_registry_dir
from countersign.planner import make_plan
from countersign.registry import Registry, load_registry
from countersign.steps import ChoiceError, check_choice, gate_offer, offered_choices

ROOT = Path(__file__).resolve().parents[3]
NOW = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def registry() -> Registry:
    return load_registry(source_registry_dir())


def _plan(registry: Registry, case: str, **entities: Any) -> Plan:
    raw = json.loads((ROOT / "usecases" / case / "fixtures" / "default.intent.json").read_text())
    raw["entities"].update(entities)
    out = make_plan(Intent.model_validate(raw), list[Evidence](), registry, Policy())
    assert isinstance(out, Plan)
    return out


# the meeting's preview: busy 13:00-14:00 (alice) and 15:00-15:30 (bob) in a 13:00-18:00 window
SLOTS = {
    "slots": [
        {"start": "2026-11-23T14:00:00.000Z", "end": "2026-11-23T15:00:00.000Z"},
        {"start": "2026-11-23T15:30:00.000Z", "end": "2026-11-23T18:00:00.000Z"},
    ]
}
SHORTLIST = {
    "shortlist": [
        {"item": "cable-a", "price": "5.00", "total": "10.00"},
        {"item": "cable-b", "price": "6.50", "total": "13.00"},
    ]
}


def _slot(start: str, minutes: int = 30) -> dict[str, str]:
    s = datetime.fromisoformat(start.replace("Z", "+00:00"))
    e = s + timedelta(minutes=minutes)
    return {"start": start, "end": e.isoformat().replace("+00:00", "Z")}


def test_a_meeting_gate_accepts_a_slot_inside_an_offered_free_time(registry: Registry) -> None:
    plan = _plan(registry, "meeting")
    offer = gate_offer(plan, registry, "gate-A", {3: SLOTS})
    got = check_choice(offer, _slot("2026-11-23T14:00:00Z"), now=NOW)
    assert got == {"start": "2026-11-23T14:00:00.000Z", "end": "2026-11-23T14:30:00.000Z"}
    assert check_choice(offer, _slot("2026-11-23T16:10:00.000+00:00"), now=NOW) == {
        "start": "2026-11-23T16:10:00.000Z",
        "end": "2026-11-23T16:40:00.000Z",
    }


MEETING_REFUSALS: list[tuple[str, Any, str]] = [
    ("inside a busy block", _slot("2026-11-23T13:15:00Z"), "choice.start"),
    ("straddles a busy block", _slot("2026-11-23T14:45:00Z"), "choice.start"),
    ("outside the signed window", _slot("2026-11-23T18:00:00Z"), "choice.start"),
    ("before the window", _slot("2026-11-23T12:00:00Z"), "choice.start"),
    ("end before start", {"start": "2026-11-23T15:00Z", "end": "2026-11-23T14:30Z"}, "choice.end"),
    ("zero length", {"start": "2026-11-23T14:00Z", "end": "2026-11-23T14:00Z"}, "choice.end"),
    ("two days", _slot("2026-11-23T15:30:00Z", 48 * 60), "choice.end"),
    ("45 minutes for a 30-minute plan", _slot("2026-11-23T15:30:00Z", 45), "choice.end"),
    ("20 minutes for a 30-minute plan", _slot("2026-11-23T15:30:00Z", 20), "choice.end"),
    ("naive time", {"start": "2026-11-23T14:00:00", "end": "2026-11-23T14:30:00"}, "choice.start"),
    ("a date only", {"start": "2026-11-23", "end": "2026-11-23T14:30:00Z"}, "choice.start"),
    ("a number", {"start": 1795000000, "end": "2026-11-23T14:30:00Z"}, "choice.start"),
    ("an extra field", {**_slot("2026-11-23T14:00:00Z"), "attendees": ["x"]}, "choice.attendees"),
    ("missing end", {"start": "2026-11-23T14:00:00Z"}, "choice.end"),
    ("not an object", ["2026-11-23T14:00:00Z"], "choice"),
    ("null", None, "choice"),
    ("a string", "2026-11-23T14:00:00Z", "choice"),
    ("an offset that lands in a busy block", _slot("2026-11-23T14:30:00+01:00"), "choice.start"),
]


@pytest.mark.parametrize(
    ("why", "choice", "field"), MEETING_REFUSALS, ids=[m[0] for m in MEETING_REFUSALS]
)
def test_a_meeting_gate_refuses_what_was_not_offered(
    registry: Registry, why: str, choice: Any, field: str
) -> None:
    plan = _plan(registry, "meeting")
    offer = gate_offer(plan, registry, "gate-A", {3: SLOTS})
    with pytest.raises(ChoiceError) as e:
        check_choice(offer, choice, now=NOW)
    assert e.value.field == field, e.value.message
    assert e.value.gate_id == "gate-A"


def test_a_slot_in_the_past_is_refused_and_resuming_does_not_judge_the_past(
    registry: Registry,
) -> None:
    plan = _plan(registry, "meeting")
    offer = gate_offer(plan, registry, "gate-A", {3: SLOTS})
    later = datetime(2026, 11, 23, 16, 0, tzinfo=UTC)
    with pytest.raises(ChoiceError, match="in the past") as e:
        check_choice(offer, _slot("2026-11-23T15:30:00Z"), now=later)
    assert e.value.field == "choice.start"
    assert check_choice(offer, _slot("2026-11-23T15:30:00Z"), now=None)["start"].endswith("Z")


def test_the_signed_length_holds_at_the_gate_when_a_preference_set_it(
    registry: Registry,
) -> None:
    plan = _plan(registry, "meeting", duration_min=45)
    offer = gate_offer(plan, registry, "gate-A", {3: SLOTS})
    with pytest.raises(ChoiceError, match="45 minutes"):
        check_choice(offer, _slot("2026-11-23T15:30:00Z", 30), now=NOW)
    assert check_choice(offer, _slot("2026-11-23T15:30:00Z", 45), now=NOW)
    shown = offered_choices(offer, now=NOW)
    assert shown and all(check_choice(offer, o["value"], now=NOW) == o["value"] for o in shown), (
        "every slot the card offers is one the server accepts"
    )
    assert {o["value"]["end"] for o in shown} >= {"2026-11-23T14:45:00.000Z"}


def test_a_gate_before_the_preview_offers_nothing(registry: Registry) -> None:
    plan = _plan(registry, "meeting")
    offer = gate_offer(plan, registry, "gate-A", {})
    with pytest.raises(ChoiceError, match="previewed"):
        check_choice(offer, _slot("2026-11-23T14:00:00Z"), now=NOW)


SHOP_REFUSALS: list[tuple[str, Any, str]] = [
    ("not in the shortlist", {"item": "cable-z"}, "choice.item"),
    ("above the budget (never shortlisted)", {"item": "cable-gold"}, "choice.item"),
    ("an extra quantity", {"item": "cable-a", "quantity": 50}, "choice.quantity"),
    ("an extra price", {"item": "cable-a", "price": "0.01"}, "choice.price"),
    ("item as a list", {"item": ["cable-a"]}, "choice.item"),
    ("item as an object", {"item": {"id": "cable-a"}}, "choice.item"),
    ("empty", {}, "choice.item"),
    ("null", None, "choice"),
    ("case changed", {"item": "CABLE-A"}, "choice.item"),
    ("padded", {"item": "cable-a "}, "choice.item"),
]


@pytest.mark.parametrize(
    ("why", "choice", "field"), SHOP_REFUSALS, ids=[m[0] for m in SHOP_REFUSALS]
)
def test_a_shop_gate_refuses_what_was_not_shortlisted(
    registry: Registry, why: str, choice: Any, field: str
) -> None:
    plan = _plan(registry, "shopping")
    offer = gate_offer(plan, registry, "gate-A", {2: SHORTLIST})
    with pytest.raises(ChoiceError) as e:
        check_choice(offer, choice, now=NOW)
    assert e.value.field == field, e.value.message


def test_a_shop_gate_accepts_a_shortlisted_item_and_gate_b_takes_no_choice(
    registry: Registry,
) -> None:
    plan = _plan(registry, "shopping")
    assert check_choice(
        gate_offer(plan, registry, "gate-A", {2: SHORTLIST}), {"item": "cable-b"}, now=NOW
    ) == {"item": "cable-b"}
    b = gate_offer(plan, registry, "gate-B", {2: SHORTLIST})
    assert not b.takes_choice
    assert check_choice(b, None, now=NOW) is None
    for smuggled in ({"item": "cable-a"}, {}, "x", 0, False):
        with pytest.raises(ChoiceError, match="take no choice"):
            check_choice(b, smuggled, now=NOW)


def test_an_empty_shortlist_accepts_nothing_and_says_so(registry: Registry) -> None:
    plan = _plan(registry, "shopping")
    offer = gate_offer(plan, registry, "gate-A", {2: {"shortlist": []}})
    with pytest.raises(ChoiceError, match="offered nothing"):
        check_choice(offer, {"item": "cable-a"}, now=NOW)
    assert offered_choices(offer, now=NOW) == []


def test_the_watcher_gate_accepts_only_the_slot_found(registry: Registry) -> None:
    plan = _plan(registry, "visa")
    found = {1: {"slots": [{"id": "s-1", "at": "2027-03-02T09:00:00Z"}]}}
    offer = gate_offer(plan, registry, "gate-A", found)
    assert check_choice(offer, {"slot": {"id": "s-1"}}, now=NOW) == {"slot": {"id": "s-1"}}
    for bad, field in (
        ({"slot": {"id": "s-2"}}, "choice.slot.id"),
        ({"slot": {"id": "s-1", "at": "x"}}, "choice.slot.id"),
        ({"slot": "s-1"}, "choice.slot.id"),
        ({"slot": {"id": "s-1"}, "consulate": "paris"}, "choice.consulate"),
    ):
        with pytest.raises(ChoiceError) as e:
            check_choice(offer, bad, now=NOW)
        assert e.value.field == field
    with pytest.raises(ChoiceError, match="previewed"):
        check_choice(gate_offer(plan, registry, "gate-A", {}), {"slot": {"id": "s-1"}}, now=NOW)


_instants = st.datetimes(
    min_value=datetime(2026, 11, 23, 12, 0), max_value=datetime(2026, 11, 23, 19, 0)
).map(lambda d: d.replace(tzinfo=UTC, microsecond=0))


@settings(max_examples=300, deadline=None)
@given(start=_instants, minutes=st.integers(min_value=-60, max_value=600))
def test_generated_slots_are_accepted_exactly_when_offered(
    registry: Registry, start: datetime, minutes: int
) -> None:
    plan = _plan(registry, "meeting")
    offer = gate_offer(plan, registry, "gate-A", {3: SLOTS})
    end = start + timedelta(minutes=minutes)
    choice = {"start": start.isoformat(), "end": end.isoformat()}
    free = [
        (datetime(2026, 11, 23, 14, tzinfo=UTC), datetime(2026, 11, 23, 15, tzinfo=UTC)),
        (datetime(2026, 11, 23, 15, 30, tzinfo=UTC), datetime(2026, 11, 23, 18, tzinfo=UTC)),
    ]
    ok = minutes == 30 and any(s <= start and end <= e for s, e in free)
    if ok:
        assert check_choice(offer, choice, now=NOW)["start"].endswith("Z")
    else:
        with pytest.raises(ChoiceError):
            check_choice(offer, choice, now=NOW)


@settings(max_examples=200, deadline=None)
@given(
    choice=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=12),
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
        ),
        max_leaves=8,
    )
)
def test_anything_but_a_shortlisted_item_is_refused(registry: Registry, choice: Any) -> None:
    plan = _plan(registry, "shopping")
    offer = gate_offer(plan, registry, "gate-A", {2: SHORTLIST})
    if choice in ({"item": "cable-a"}, {"item": "cable-b"}):
        return
    with pytest.raises(ChoiceError):
        check_choice(offer, choice, now=NOW)


def test_a_whole_offer_as_listed_is_accepted_as_its_pick(registry: Registry) -> None:
    plan = _plan(registry, "shopping")
    offer = gate_offer(plan, registry, "gate-A", {2: SHORTLIST})
    assert check_choice(offer, SHORTLIST["shortlist"][1], now=NOW) == {"item": "cable-b"}
    changed = {**SHORTLIST["shortlist"][1], "total": "0.01"}
    with pytest.raises(ChoiceError) as e:
        check_choice(offer, changed, now=NOW)
    assert e.value.field == "choice.price" or e.value.field.startswith("choice.")
