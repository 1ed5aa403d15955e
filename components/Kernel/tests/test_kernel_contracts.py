"""Contracts: unknown fields named, one spelling per instant, no reserved keys from people."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
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
