"""Evidence's ``why`` (GLOBAL_SPEC §3): the sentence a person reads is part of the signed form
when present, and evidence without one serializes and hashes exactly as before it existed."""

from __future__ import annotations

import pytest

from countersign.kernel import Evidence, PreviewWrapper, canonical_bytes, content_hash

OLD = {
    "type": "contact",
    "key": "Bob",
    "value": {"email": "bob@example.com"},
    "confidence": 0.8,
    "source_ref": "contact:1",
    "ttl_days": None,
}


def test_evidence_without_why_is_what_it_was() -> None:
    ev = Evidence.model_validate(OLD)
    assert (
        ev.to_json() == OLD
        and "why" not in PreviewWrapper(can_execute=True, evidence=[ev]).to_json()["evidence"][0]
    )
    assert content_hash([ev.to_json()]) == content_hash([OLD])


def test_why_is_signed_with_the_item() -> None:
    said = Evidence.model_validate({**OLD, "why": "Bob is in your contacts."})
    assert said.to_json()["why"] == "Bob is in your contacts."
    assert canonical_bytes(said.to_json()) != canonical_bytes(OLD)
    with pytest.raises(ValueError):
        Evidence.model_validate({**OLD, "why": ""})
    with pytest.raises(ValueError):
        Evidence.model_validate({**OLD, "why": "x" * 301})
