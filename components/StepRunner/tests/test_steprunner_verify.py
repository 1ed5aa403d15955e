"""Verify first, through the ``SignedPlan`` path too: ``verify_or_audit`` (like
``verify_signed_plan``) takes a ``SignedPlan`` model as well as a JSON document. A model has no
written form, so the as-written checks hold trivially for its dump; what must hold is that no
content other than what was signed gets through — not by a copy that carries another plan, nor
by canonical bytes handed in with it, nor by a model built without validation."""

from __future__ import annotations

import warnings
from datetime import datetime
from typing import Any

import pytest

from countersign.kernel import (
    BadSignatureError,
    CountersignError,
    HashMismatchError,
    MalformedEnvelopeError,
    Plan,
    Policy,
    SignatureError,
    SignedPlan,
    canonical_bytes,
    sha256_hex,
)
from countersign.planner import make_plan
from countersign.planner.testing import make_intent
from countersign.registry import Registry
from countersign.signer import KeyRing, sign_plan
from countersign.steps import verify_or_audit

LOCAL = Policy(providers={"calendar": "caldav", "mail": "smtp", "chat": "slack"})


class _Refusals:
    """A recorder that keeps the refusals (the StepRecorder protocol; previews unused here)."""

    def __init__(self) -> None:
        self.refused: list[tuple[Any, str]] = []

    def signature_refused(self, document: Any, error: CountersignError, *, actor: str) -> None:
        self.refused.append((document, error.code))

    def preview_done(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("no preview here")


@pytest.fixture(scope="module")
def signed(registry: Registry, keyring: KeyRing) -> SignedPlan:
    plan = make_plan(make_intent("schedule_meeting"), [], registry, LOCAL)
    assert isinstance(plan, Plan)
    pid, key = keyring.active()
    return sign_plan(plan, key=key, pubkey_id=pid, signer="planner@system")


def _altered(plan: Plan) -> Plan:
    """The same plan with one more argument on its first step (a change a signer never saw)."""
    doc = plan.to_json()
    doc["graph"][0]["args"] = {**doc["graph"][0]["args"], "cc": "mallory@example.com"}
    return Plan.model_validate(doc)


def _verify(document: Any, keyring: KeyRing, rec: _Refusals, now: datetime) -> Any:
    return verify_or_audit(document, keys=keyring, recorder=rec, actor="u1", now=now)


def test_a_signed_plan_model_verifies_to_exactly_what_was_signed(
    signed: SignedPlan, keyring: KeyRing
) -> None:
    rec = _Refusals()
    verified = _verify(signed, keyring, rec, signed.plan.meta.created_at)
    assert verified.plan == signed.plan and verified.plan_hash == signed.plan_hash
    assert verified.canonical == signed.canonical == canonical_bytes(signed.plan.to_json())
    assert verified.signed() == signed and not rec.refused


def test_an_altered_plan_cannot_pass_as_a_signed_plan(signed: SignedPlan, keyring: KeyRing) -> None:
    now = signed.plan.meta.created_at
    altered = _altered(signed.plan)
    assert signed.canonical  # the original's bytes are cached (and copied by model_copy)
    new_hash = sha256_hex(canonical_bytes(altered.to_json()))
    # a plan document where a Plan belongs (model_construct does not validate)
    unknown_field: Any = {**signed.plan.to_json(), "shadow": {"step": 1, "uses": "payments"}}
    with warnings.catch_warnings():  # pydantic warns when it dumps a dict where a Plan belongs
        warnings.simplefilter("ignore")
        attempts: dict[str, tuple[Any, type[SignatureError]]] = {
            # a copy that swaps the plan keeps the original's signature, hash and cached bytes
            "copy, same hash": (
                signed.model_copy(update={"plan": altered}),
                HashMismatchError,
            ),
            "copy, hash recomputed": (
                signed.model_copy(update={"plan": altered, "plan_hash": new_hash}),
                BadSignatureError,
            ),
            # the canonical bytes handed in are the signed plan's; verification never reads them
            "of(), original bytes": (
                SignedPlan.of(altered, signed.signature, signed.plan_hash, signed.canonical),
                HashMismatchError,
            ),
            # built without validation: an unknown field rides along in the plan
            "construct, unknown field": (
                SignedPlan.model_construct(
                    plan=unknown_field, signature=signed.signature, plan_hash=signed.plan_hash
                ),
                HashMismatchError,
            ),
            "construct, unknown field, hash recomputed": (
                SignedPlan.model_construct(
                    plan=unknown_field,
                    signature=signed.signature,
                    plan_hash=sha256_hex(canonical_bytes(unknown_field)),
                ),
                BadSignatureError,
            ),
        }
        for name, (attempt, error) in attempts.items():
            rec = _Refusals()
            with pytest.raises(error):
                _verify(attempt, keyring, rec, now)
            assert [code for _, code in rec.refused] == [error.code], name


def test_a_respelled_document_is_refused_as_written_and_as_a_model_runs_only_the_signed_bytes(
    signed: SignedPlan, keyring: KeyRing
) -> None:
    """The as-written checks belong to the bytes a document was read from: the raw document with
    another spelling of the same instant and nonce is refused; parsed into a SignedPlan first, it
    is normalized back to the signer's spelling, and what verifies is the signed content, byte for
    byte — never the document's own spelling."""
    doc = signed.to_json()
    doc["plan"]["intent"]["received_at"] = doc["plan"]["intent"]["received_at"].replace(
        "Z", "+00:00"
    )
    doc["signature"]["nonce"] = doc["signature"]["nonce"].lower()
    now = signed.plan.meta.created_at
    with pytest.raises((HashMismatchError, MalformedEnvelopeError)):
        _verify(doc, keyring, _Refusals(), now)
    model = SignedPlan.model_validate(doc)
    verified = _verify(model, keyring, _Refusals(), now)
    assert verified.canonical == signed.canonical and verified.plan == signed.plan
