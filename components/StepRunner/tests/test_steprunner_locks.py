"""Which resources writes lock (``steps.locks``): the registry's template filled with the args as
sent; anything that is not a plain value locks the whole kind; ops without a lock lock nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from countersign.kernel import Evidence, Intent, Plan, Policy, source_registry_dir
from countersign.planner import make_plan
from countersign.registry import Registry, load_registry
from countersign.steps import lock_keys, step_lock_key

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def registry() -> Registry:
    return load_registry(source_registry_dir())


def _plan(registry: Registry, case: str) -> Plan:
    raw = json.loads((ROOT / "usecases" / case / "fixtures" / "default.intent.json").read_text())
    out = make_plan(Intent.model_validate(raw), list[Evidence](), registry, Policy())
    assert isinstance(out, Plan)
    return out


def _writes(registry: Registry, plan: Plan) -> list[int]:
    return [s.step for s in plan.graph if registry.op(s.uses, s.call).safety == "write"]


def test_a_meeting_locks_each_attendees_calendar_and_the_mail_sender(registry: Registry) -> None:
    plan = _plan(registry, "meeting")
    keys = lock_keys(plan, _writes(registry, plan), registry, {}, {})
    calendars = [k for k in keys if k.startswith("calendar:")]
    assert len(calendars) >= 2 and "calendar:*" not in calendars, keys
    assert keys == sorted(set(keys))


def test_shopping_locks_the_cart(registry: Registry) -> None:
    plan = _plan(registry, "shopping")
    assert "shop:cart" in lock_keys(plan, _writes(registry, plan), registry, {}, {})


def test_no_writes_lock_nothing(registry: Registry) -> None:
    plan = _plan(registry, "meeting")
    reads = [s.step for s in plan.graph if registry.op(s.uses, s.call).safety == "read"]
    assert lock_keys(plan, reads, registry, {}, {}) == []


@given(
    st.one_of(
        st.none(),
        st.booleans(),
        st.just(""),
        st.lists(st.text(max_size=3), max_size=2),
        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
        st.floats(allow_nan=False),
    )
)
def test_a_value_that_is_not_plain_locks_the_whole_kind(value: Any) -> None:
    assert step_lock_key("calendar:{user}", {"user": value}) == "calendar:*"


@given(st.text(min_size=1, max_size=40), st.integers(min_value=0, max_value=10**9))
def test_plain_values_fill_the_template(user: str, n: int) -> None:
    assert step_lock_key("calendar:{user}", {"user": user}) == f"calendar:{user}"
    assert step_lock_key("chat:{channel}", {"channel": n}) == f"chat:{n}"
    assert step_lock_key("shop:cart", {"user": user}) == "shop:cart"
    assert step_lock_key(None, {"user": user}) is None
