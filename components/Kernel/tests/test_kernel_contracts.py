"""Contracts: unknown fields named, one spelling per instant, no reserved keys from people."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from countersign.kernel import (
    ApprovalToken,
    ContractError,
    Evidence,
    ExecuteWrapper,
    Intent,
    Needs,
    Plan,
    PlanStep,
    Policy,
    PreviewWrapper,
    SignatureEnvelope,
    SignedPlan,
    canonical_bytes,
    derived_ulid,
    format_utc,
    parse_contract,
    schema_snapshot,
)

BASE: dict[str, Any] = {
    "intent": "schedule_meeting",
    "intent_id": "01JDQ3Z0000000000000000000",
    "received_at": "2026-11-22T10:00:00Z",
    "user_id": "u1",
}


def test_unknown_field_is_named() -> None:
    with pytest.raises(ContractError, match="unknown field 'colour'"):
        parse_contract(Intent, {**BASE, "colour": "red"})
    with pytest.raises(ContractError, match="unknown field 'x'"):
        parse_contract(
            PlanStep,
            {
                "step": 1,
                "mode": "interactive",
                "role": "Fetcher",
                "uses": "a",
                "call": "b",
                "dry_run": True,
                "x": 1,
            },
        )


def test_missing_field_is_named() -> None:
    with pytest.raises(ContractError, match="missing field 'user_id'"):
        parse_contract(Intent, {k: v for k, v in BASE.items() if k != "user_id"})


def test_one_instant_one_spelling() -> None:
    a = Intent.model_validate({**BASE, "received_at": "2026-11-22T11:00:00+01:00"})
    b = Intent.model_validate({**BASE, "received_at": "2026-11-22T10:00:00.000000Z"})
    assert canonical_bytes(a.to_json()) == canonical_bytes(b.to_json())
    assert a.to_json()["received_at"] == "2026-11-22T10:00:00.000Z"


def test_naive_timestamp_is_refused() -> None:
    with pytest.raises(ContractError, match="timezone"):
        parse_contract(Intent, {**BASE, "received_at": "2026-11-22T10:00:00"})


@pytest.mark.parametrize(
    "entities",
    [{"$ref": "steps.1.output"}, {"a": [{"$ref": "x"}]}, {"big": 2**53}],
)
def test_person_values_cannot_pose_as_references_or_overflow(entities: dict[str, Any]) -> None:
    with pytest.raises(ContractError):
        parse_contract(Intent, {**BASE, "entities": entities})


def test_bad_ulid_and_zone() -> None:
    with pytest.raises(ContractError, match="ULID"):
        parse_contract(Intent, {**BASE, "intent_id": "not-a-ulid"})
    with pytest.raises(ContractError, match="time zone"):
        parse_contract(Intent, {**BASE, "tz": "Mars/Olympus"})


def test_derived_ulid_is_deterministic() -> None:
    i = Intent.model_validate(BASE)
    assert derived_ulid(i.received_at, b"x") == derived_ulid(i.received_at, b"x")
    assert derived_ulid(i.received_at, b"x") != derived_ulid(i.received_at, b"y")


def test_json_schemas_are_current() -> None:
    folder = Path(__file__).resolve().parents[1] / "schemas"
    models: list[type[BaseModel]] = [
        Intent,
        Evidence,
        Plan,
        PlanStep,
        SignatureEnvelope,
        SignedPlan,
        Needs,
        PreviewWrapper,
        ExecuteWrapper,
        ApprovalToken,
        Policy,
    ]
    stale = schema_snapshot(
        models, folder, update=os.environ.get("COUNTERSIGN_UPDATE_SCHEMAS") == "1"
    )
    assert not stale, f"schemas out of date: {stale}; rerun with COUNTERSIGN_UPDATE_SCHEMAS=1"


def _signed_doc(**step_args: Any) -> dict[str, Any]:
    plan = {
        "plan_id": "01JDQ3Z0000000000000000001",
        "intent": BASE,
        "graph": [
            {
                "step": 1,
                "mode": "interactive",
                "role": "Fetcher",
                "uses": "calendar",
                "call": "free_busy",
                "args": step_args,
                "dry_run": True,
            }
        ],
        "constraints": {"ttl_s": 600},
        "plugins": ["calendar"],
        "meta": {
            "created_at": "2026-11-22T10:00:00.000Z",
            "planner_version": "1",
            "registry_version": "a" * 64,
            "policy_version": "b" * 64,
            "evidence_hash": "c" * 64,
        },
    }
    envelope = {
        "algo": "Ed25519",
        "signer": "planner@system",
        "ts": "2026-11-22T10:00:00.000Z",
        "nonce": "01JDQ3Z0000000000000000002",
        "signature": "A" * 86 + "==",
        "pubkey_id": "k1",
    }
    return {"plan": plan, "signature": envelope, "plan_hash": "d" * 64}


def test_signed_plans_are_equal_by_their_fields_whether_or_not_canonical_was_computed() -> None:
    """The canonical bytes are a cache, not part of the value: two equal signed plans compare
    equal however far each got (one read ``canonical``, one did not, one came from the signer's
    parts with its bytes handed in)."""
    doc = _signed_doc(attendees=["a@example.com"])
    computed, fresh = SignedPlan.model_validate(doc), SignedPlan.model_validate(doc)
    assert computed.canonical == canonical_bytes(computed.plan.to_json())
    assert computed == fresh and fresh == computed
    seeded = SignedPlan.of(fresh.plan, fresh.signature, fresh.plan_hash, computed.canonical)
    assert seeded == fresh == computed and [fresh] == [seeded]
    other = SignedPlan.model_validate(_signed_doc(attendees=["b@example.com"]))
    assert other != computed and computed != other
    assert SignedPlan.model_validate({**doc, "plan_hash": "e" * 64}) != fresh
    assert computed != doc  # a document is not a SignedPlan


def test_canonical_always_follows_the_plan_it_is_read_from() -> None:
    """A copy with another plan never serves the bytes cached for the first one (they would be
    the bytes of a plan it does not carry)."""
    first = SignedPlan.model_validate(_signed_doc(attendees=["a@example.com"]))
    assert first.canonical  # cached now
    altered = Plan.model_validate(_signed_doc(attendees=["mallory@example.com"])["plan"])
    copy = first.model_copy(update={"plan": altered})
    assert copy.canonical == canonical_bytes(altered.to_json()) != first.canonical
    assert first.model_copy().canonical == first.canonical
    seeded = SignedPlan.of(first.plan, first.signature, first.plan_hash, first.canonical)
    moved = seeded.model_copy(update={"plan": altered})
    assert moved.canonical == canonical_bytes(altered.to_json())


@settings(max_examples=800, deadline=None)
@given(
    st.datetimes(
        min_value=datetime(1, 1, 2),  # naive bounds: the zone is drawn separately
        max_value=datetime(9999, 12, 30),
        timezones=st.sampled_from(
            [UTC, timezone(timedelta(hours=5, minutes=45)), timezone(-timedelta(hours=11))]
        ),
    )
)
@example(datetime(999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC))
@example(datetime(1000, 1, 1, tzinfo=UTC))
def test_format_utc_is_the_strftime_spelling(at: datetime) -> None:
    """format_utc's faster path writes exactly what its strftime definition writes."""
    v = at.astimezone(UTC)
    assert format_utc(at) == v.strftime("%Y-%m-%dT%H:%M:%S.") + f"{v.microsecond // 1000:03d}Z"
