"""Test support for planning and signing: fixtures and hypothesis strategies (a pytest plugin),
``signed_plan`` (an intent planned and signed, as the signed-plan document) and ``until`` (wait
for what a real server does by polling with a deadline, never by sleeping a guessed time).

Registered in the repository's ``conftest.py``. Keys made here are random per test run and never
written to the repository.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import strategies as st
from ulid import ULID

from countersign.kernel import Evidence, Intent, Plan, Policy, source_registry_dir
from countersign.registry import Registry, load_registry
from countersign.signer import KeyRing, sign_plan

from .core import make_plan

__all__ = [
    "assert_golden_plans_gate_writes",
    "evidence_items",
    "make_intent",
    "meeting_intents",
    "signed_plan",
    "until",
]

T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
_T = TypeVar("_T")


@pytest.fixture(scope="session")
def registry() -> Registry:
    """The repository's registry snapshot."""
    return load_registry(source_registry_dir())


@pytest.fixture(scope="session")
def keyring() -> KeyRing:
    """An in-memory key ring with one fresh random key ``k1``."""
    return KeyRing.from_seed(os.urandom(32), pubkey_id="k1", created_at=T0)


@pytest.fixture
def policy() -> Policy:
    """The default Policy."""
    return Policy()


def signed_plan(
    what: Intent | Plan,
    keyring: KeyRing,
    registry: Registry | None = None,
    policy: Policy | None = None,
) -> dict[str, Any]:
    """The signed-plan document (GLOBAL_SPEC §5) of ``what``: an intent is planned first with no
    evidence under ``registry`` and ``policy`` (default ``Policy()``); signed with the key ring's
    active key by ``planner@system``."""
    if isinstance(what, Intent):
        assert registry is not None, "planning an intent needs the registry"
        made = make_plan(what, [], registry, policy or Policy())
        assert isinstance(made, Plan), made
        what = made
    pid, key = keyring.active()
    return sign_plan(what, key=key, pubkey_id=pid, signer="planner@system").to_json()


def until(probe: Callable[[], _T], timeout: float = 30.0, *, every: float = 0.2) -> _T:
    """Call ``probe`` every ``every`` seconds until it answers something truthy, and return that;
    at the deadline (``timeout`` seconds of wall-clock time) return its last answer, so the
    caller's ``assert until(...), <what it shows on failure>`` decides. For real servers and
    processes; on Temporal's time-skipping server time is moved with ``env.sleep`` instead."""
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if got or time.monotonic() >= deadline:
            return got
        time.sleep(every)


def make_intent(name: str = "schedule_meeting", **overrides: Any) -> Intent:
    """An intent with sensible entities for ``name``; ``overrides`` replace top-level fields."""
    examples: dict[str, dict[str, Any]] = {
        "schedule_meeting": {
            "participants": ["alice@example.com", "bob@example.com"],
            "duration_min": 30,
            "window_start": "2026-11-23T13:00:00Z",
            "window_end": "2026-11-23T18:00:00Z",
            "title": "Quarterly sync",
        },
        "find_meeting_time": {
            "participants": ["alice@example.com", "bob@example.com"],
            "duration_min": 30,
            "window_start": "2026-11-23T13:00:00Z",
            "window_end": "2026-11-23T18:00:00Z",
            "title": "Find a time",
        },
        "purchase_item": {"query": "usb-c cable", "max_price": "15.00", "quantity": 2},
        "watch_visa_slots": {
            "consulate": "lisbon",
            "date_from": "2027-03-01T00:00:00Z",
            "date_to": "2027-03-31T00:00:00Z",
        },
    }
    entities = examples[name]
    doc: dict[str, Any] = {
        "intent": name,
        "intent_id": "01JDQ3Z0000000000000000000",
        "received_at": "2026-11-22T10:00:00Z",
        "user_id": "u-alice",
        "tz": "Europe/Lisbon",
        "entities": entities,
    }
    doc.update(overrides)
    return Intent.model_validate(doc)


_emails = st.from_regex(r"\A[a-z]{1,8}@[a-z]{1,8}\.(com|org|dev)\Z")
_text = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=24
).filter(lambda s: s.strip() != "")


@st.composite
def meeting_intents(draw: st.DrawFn) -> Intent:
    """Schedule-meeting intents with varied people, times, titles, zones and ids."""
    # a window that can hold the meeting and has not ended when it is asked for (the planner
    # refuses any other: Planner SPEC, "what can be offered")
    duration = draw(st.integers(5, 240))
    start = T0 + timedelta(minutes=draw(st.integers(0, 60 * 24 * 365)))
    end = start + timedelta(minutes=draw(st.integers(max(30, duration), 60 * 24 * 7)))
    last_ms = (end - T0) // timedelta(milliseconds=1) - 1
    received = T0 + timedelta(milliseconds=draw(st.integers(0, min(10**10, last_ms))))
    ulid_bytes = draw(st.binary(min_size=16, max_size=16))
    return Intent(
        intent="schedule_meeting",
        intent_id=str(ULID.from_bytes(bytes([ulid_bytes[0] & 0x7F]) + ulid_bytes[1:])),
        received_at=received,
        user_id=draw(st.from_regex(r"\Au-[a-z0-9]{1,12}\Z")),
        tz=draw(st.sampled_from(["UTC", "Europe/Lisbon", "America/Chicago", "Asia/Tokyo"])),
        context_budget=draw(st.integers(0, 5)),
        entities={
            "participants": draw(st.lists(_emails, min_size=1, max_size=4, unique=True)),
            "duration_min": duration,
            "window_start": start.isoformat().replace("+00:00", "Z"),
            "window_end": end.isoformat().replace("+00:00", "Z"),
            "title": draw(_text),
        },
    )


def evidence_items() -> st.SearchStrategy[list[Evidence]]:
    """Small lists of typed evidence items."""
    item = st.builds(
        Evidence,
        type=st.sampled_from(["preference", "history", "contact", "plan", "exemplar"]),
        key=st.from_regex(r"\A[a-z_]{1,16}\Z"),
        value=st.one_of(st.integers(-1000, 1000), _text, st.booleans()),
        confidence=st.floats(0, 1, allow_nan=False),
        source_ref=st.from_regex(r"\Akv:[a-z/]{1,16}\Z"),
        ttl_days=st.one_of(st.none(), st.integers(0, 3650)),
    )
    return st.lists(item, max_size=4)


def assert_golden_plans_gate_writes(usecase_dir: Path) -> None:
    """Every golden plan of a use case parses and runs its Bookers/Notifiers after a gate."""
    from countersign.kernel import Plan, parse_contract  # noqa: PLC0415

    goldens = sorted((usecase_dir / "plans").glob("*.plan.json"))
    assert goldens, f"no golden plans under {usecase_dir}"
    for golden in goldens:
        plan = parse_contract(Plan, json.loads(golden.read_text())["plan"])
        gates = [s.step for s in plan.graph if s.gate_id]
        assert gates, golden
        for s in plan.graph:
            if s.role in {"Booker", "Notifier"}:
                assert s.step > min(gates) and not s.dry_run, (golden, s.step)
