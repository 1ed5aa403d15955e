"""Verify once per process: remembered Ed25519 results never stand in for a changed document,
and the fast paths give the slow path's bytes, hash and signature byte for byte."""

from __future__ import annotations

import base64
import copy
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from nacl.signing import VerifyKey

from countersign.kernel import (
    BadSignatureError,
    HashMismatchError,
    KeyRevokedError,
    Plan,
    Policy,
    SignedPlan,
    sha256_hex,
)
from countersign.kernel.canonical import canonical_bytes_reference
from countersign.planner import make_plan
from countersign.planner.testing import T0, make_intent, meeting_intents
from countersign.registry import Registry
from countersign.signer import (
    DOMAIN,
    PROVEN,
    KeyRing,
    ProvenSignatures,
    plan_hash,
    sign_plan,
    verify_signed_plan,
)

HC = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


@pytest.fixture
def ed25519_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bytes]]:
    """Every message PyNaCl is asked to verify, from a memory that starts empty."""
    calls: list[bytes] = []
    real = VerifyKey.verify

    def counting(self: VerifyKey, smessage: bytes, signature: bytes | None = None) -> bytes:
        calls.append(smessage)
        return real(self, smessage, signature)

    monkeypatch.setattr(VerifyKey, "verify", counting)
    PROVEN.clear()
    yield calls
    PROVEN.clear()


def _plan(registry: Registry) -> Plan:
    plan = make_plan(make_intent(), [], registry, Policy())
    assert isinstance(plan, Plan)
    return plan


def _sign(plan: Plan, ring: KeyRing) -> SignedPlan:
    pid, key = ring.active()
    return sign_plan(plan, key=key, pubkey_id=pid, signer="planner@system")


def test_a_signature_this_process_made_or_saw_hold_is_checked_once(
    registry: Registry, keyring: KeyRing, ed25519_calls: list[bytes]
) -> None:
    doc = _sign(_plan(registry), keyring).to_json()
    verify_signed_plan(doc, keys=keyring)
    assert ed25519_calls == []  # made here: Ed25519 correctness, nothing to recompute
    PROVEN.clear()  # as a verifier in another process sees it
    verify_signed_plan(doc, keys=keyring)
    verify_signed_plan(json.loads(json.dumps(doc, indent=2)), keys=keyring)
    assert len(ed25519_calls) == 1  # then remembered


def test_a_remembered_signature_never_covers_a_change(
    registry: Registry, keyring: KeyRing, ed25519_calls: list[bytes]
) -> None:
    """Any other plan, hash or envelope is another message: verified in full, and refused."""
    doc = _sign(_plan(registry), keyring).to_json()
    plan = copy.deepcopy(doc["plan"])
    plan["graph"][0]["args"]["user"] = "mallory@example.com"
    with pytest.raises(HashMismatchError):
        verify_signed_plan({**doc, "plan": plan}, keys=keyring)
    with pytest.raises(BadSignatureError):
        verify_signed_plan({**doc, "plan": plan, "plan_hash": plan_hash(plan)}, keys=keyring)
    with pytest.raises(BadSignatureError):
        verify_signed_plan(
            {**doc, "signature": {**doc["signature"], "signer": "mallory@system"}}, keys=keyring
        )
    assert len(ed25519_calls) == 2  # both signature checks ran, neither was remembered
    assert len(PROVEN) == 1  # only what sign_plan made


def test_the_same_key_id_in_another_ring_is_another_key(
    registry: Registry, keyring: KeyRing, ed25519_calls: list[bytes]
) -> None:
    other = KeyRing.from_seed(os.urandom(32), pubkey_id="k1", created_at=T0)
    doc = _sign(_plan(registry), other).to_json()  # remembered under the other public key
    with pytest.raises(BadSignatureError):
        verify_signed_plan(doc, keys=keyring)
    assert len(ed25519_calls) == 1


def test_a_key_revoked_after_signing_is_refused(
    registry: Registry, ed25519_calls: list[bytes]
) -> None:
    ring = KeyRing.from_seed(os.urandom(32), pubkey_id="k1", created_at=T0)
    doc = _sign(_plan(registry), ring).to_json()
    verify_signed_plan(doc, keys=ring)
    ring.rotate(now=T0, seed=os.urandom(32))
    ring.revoke("k1", now=T0)
    with pytest.raises(KeyRevokedError):
        verify_signed_plan(doc, keys=ring)


def test_a_mutated_or_copied_plan_never_verifies_with_stale_bytes(
    registry: Registry, keyring: KeyRing, ed25519_calls: list[bytes]
) -> None:
    """The signed plan object changed after signing, or swapped by a copy: whatever the
    SignedPlan cached and PROVEN remembers, verification reads the plan it is given."""
    plan = _plan(registry)
    signed = _sign(plan, keyring)
    assert signed.canonical  # cached against this plan object
    other = make_plan(make_intent("find_meeting_time"), [], registry, Policy())
    assert isinstance(other, Plan)
    with pytest.raises(HashMismatchError):
        verify_signed_plan(signed.model_copy(update={"plan": other}), keys=keyring)
    with pytest.raises(HashMismatchError):
        verify_signed_plan(signed.model_copy(update={"plan": other}).to_json(), keys=keyring)
    plan.graph[0].args["user"] = "mallory@example.com"  # frozen model, mutable dict inside
    with pytest.raises(HashMismatchError):
        verify_signed_plan(signed, keys=keyring)
    with pytest.raises(HashMismatchError):
        verify_signed_plan(signed.to_json(), keys=keyring)
    assert ed25519_calls == []  # refused before any signature check


@settings(max_examples=60, deadline=None, suppress_health_check=HC)
@given(intent=meeting_intents())
def test_round_trip_is_the_slow_path_byte_for_byte(
    intent: Any, registry: Registry, keyring: KeyRing
) -> None:
    """plan -> sign -> verify, warm (remembered) and cold: the canonical bytes, hash and signature
    are those of the reference canonicalization (``rfc8785``) and a plain Ed25519 signature."""
    plan = make_plan(intent, [], registry, Policy())
    assert isinstance(plan, Plan)
    pid, key = keyring.active()
    reference = canonical_bytes_reference(plan.to_json())
    signed = sign_plan(plan, key=key, pubkey_id=pid, signer="planner@system")
    assert signed.canonical == reference
    assert signed.plan_hash == sha256_hex(reference)
    body = {k: v for k, v in signed.envelope.to_json().items() if k != "signature"}
    message = DOMAIN + canonical_bytes_reference({**body, "plan_hash": sha256_hex(reference)})
    assert base64.b64decode(signed.envelope.signature) == key.sign(message).signature
    for cold in (False, True):
        if cold:
            PROVEN.clear()
        text = json.dumps(signed.to_json(), indent=1)
        verified = verify_signed_plan(json.loads(text), keys=keyring)
        assert verified.canonical == reference
        assert verified.plan_hash == sha256_hex(reference)
        assert verified.plan == plan
        assert verified.envelope == signed.envelope


def test_the_memory_is_bounded_oldest_first() -> None:
    memo = ProvenSignatures(size=2)
    memo.add(b"k", b"m1", b"s")
    memo.add(b"k", b"m2", b"s")
    memo.add(b"k", b"m1", b"s")  # seen again: now the youngest
    memo.add(b"k", b"m3", b"s")
    assert (b"k", b"m2", b"s") not in memo
    assert (b"k", b"m1", b"s") in memo
    assert (b"k", b"m3", b"s") in memo
    assert len(memo) == 2
    with pytest.raises(ValueError, match="size"):
        ProvenSignatures(size=0)
