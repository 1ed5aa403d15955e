"""What a stale preview says changed (``Change.summary``): JSON values bounded by structure —
never a Python repr, never a string cut mid-way — so the card can show them in the person's
clock and currency."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from countersign.execute.core import Change, bounded

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=400),
    lambda inner: st.lists(inner, max_size=30) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=200,
)


def test_a_changed_price_is_carried_as_json_not_a_repr() -> None:
    offers = [
        {"item": f"cable-{i}", "title": "usb-c cable 2m " * 8, "price": "9.90"} for i in range(3)
    ]
    moved = [{**offers[0], "price": "14.00"}, *offers[1:]]
    summary = Change(step=1, before={"offers": offers}, after={"offers": moved}).summary()
    assert summary == {"step": 1, "changed": {"offers": [offers, moved]}}
    text = json.dumps(summary)
    assert "{'" not in text and "..." not in text


def test_long_lists_are_cut_by_items_and_long_strings_by_characters() -> None:
    busy = [[f"2026-11-23T{h:02d}:00:00Z", f"2026-11-23T{h:02d}:30:00Z"] for h in range(24)]
    old, new = Change(step=2, before={"busy": busy}, after={"busy": busy[:1]}).summary()["changed"][
        "busy"
    ]
    assert old == busy[:20] and new == busy[:1]  # whole intervals, never half of one
    assert bounded("x" * 1000) == "x" * 299 + "…"
    assert bounded({"a": {"b": {"c": {"d": [1, 2, 3]}}}}) == {"a": {"b": {"c": {"d": "(3 items)"}}}}


def test_a_read_that_is_not_an_object_changes_as_its_value() -> None:
    assert Change(step=3, before=[1], after=[2]).summary() == {
        "step": 3,
        "changed": {"value": [[1], [2]]},
    }


@given(_JSON)
def test_bounded_values_are_json_and_small(value: Any) -> None:
    out = bounded(value)
    text = json.dumps(out)  # JSON through and through (no repr, no object that will not encode)
    assert len(text) < 200_000
    if isinstance(value, str | int | bool) or value is None:
        assert out == value or (isinstance(value, str) and len(value) > 300)
