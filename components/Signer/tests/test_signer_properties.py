"""Signer invariants under attack: any change of content fails; reformatting still verifies."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from countersign.kernel import (
    BadSignatureError,
    HashMismatchError,
    MalformedEnvelopeError,
    Plan,
    Policy,
    SignatureError,
    canonical_bytes,
)
from countersign.planner import make_plan
from countersign.planner.testing import meeting_intents, signed_plan
from countersign.registry import Registry
from countersign.signer import KeyRing, plan_hash, verify_signed_plan

HC = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        doc = doc[p]
    return doc


def _mutate(value: Any, choice: int) -> Any:
    """A value that differs from ``value`` as JSON data."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1 + choice % 3
    if isinstance(value, float):
        return value + 0.5
    if isinstance(value, str):
        return value + "x" if choice % 2 else "Y" + value
    if value is None:
        return "null"
    if isinstance(value, list):
        if len(value) >= 2 and value[0] != value[-1] and choice % 3 == 0:
            return list(reversed(value))
        if value and choice % 3 == 1:
            return value[:-1]
        return [*value, "extra"]
    if isinstance(value, dict):
        if value and choice % 2:
            k = sorted(value)[choice % len(value)]
            return {kk: vv for kk, vv in value.items() if kk != k}
        return {**value, "added_key": choice}
    raise AssertionError(type(value))


def _set(doc: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    parent = _get(doc, path[:-1])
    parent[path[-1]] = new
    return doc


@settings(max_examples=150, deadline=None, suppress_health_check=HC)
@given(intent=meeting_intents(), pick=st.integers(0, 10**6), choice=st.integers(0, 100))
def test_any_change_of_plan_content_fails_verification(
    intent: Any, pick: int, choice: int, registry: Registry, keyring: KeyRing
) -> None:
    plan = make_plan(intent, [], registry, Policy())
    assert isinstance(plan, Plan)
    doc = signed_plan(plan, keyring)
    paths = _paths(doc["plan"])
    path = paths[pick % len(paths)]
    tampered_plan = _set(copy.deepcopy(doc["plan"]), path, _mutate(_get(doc["plan"], path), choice))
    assert canonical_bytes(tampered_plan) != canonical_bytes(doc["plan"])
    # With the stated hash: the hash no longer matches.
    with pytest.raises(HashMismatchError):
        verify_signed_plan({**doc, "plan": tampered_plan}, keys=keyring)
    # An attacker who also restates the hash hits the signature.
    with pytest.raises(BadSignatureError):
        verify_signed_plan(
            {**doc, "plan": tampered_plan, "plan_hash": plan_hash(tampered_plan)}, keys=keyring
        )
    # One who drops it is refused before that: the signer always writes plan_hash.
    with pytest.raises(MalformedEnvelopeError, match="plan_hash"):
        verify_signed_plan({"plan": tampered_plan, "signature": doc["signature"]}, keys=keyring)


@settings(max_examples=60, deadline=None, suppress_health_check=HC)
@given(intent=meeting_intents(), pick=st.integers(0, 100), choice=st.integers(0, 100))
def test_any_change_of_envelope_fails(
    intent: Any, pick: int, choice: int, registry: Registry, keyring: KeyRing
) -> None:
    plan = make_plan(intent, [], registry, Policy())
    assert isinstance(plan, Plan)
    doc = signed_plan(plan, keyring)
    field = sorted(doc["signature"])[pick % len(doc["signature"])]
    env = dict(doc["signature"])
    env[field] = _mutate(env[field], choice)
    with pytest.raises(SignatureError):
        verify_signed_plan({**doc, "signature": env}, keys=keyring)


def _shuffle_keys(value: Any, rnd: random.Random) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {k: _shuffle_keys(v, rnd) for k, v in items}
    if isinstance(value, list):
        return [_shuffle_keys(v, rnd) for v in value]
    return value


@settings(max_examples=60, deadline=None, suppress_health_check=HC)
@given(
    intent=meeting_intents(),
    seed=st.integers(0, 2**32),
    indent=st.sampled_from([None, 0, 1, 2, 7, "\t"]),
    ascii_only=st.booleans(),
)
def test_reformatted_identical_plan_still_verifies(
    intent: Any, seed: int, indent: Any, ascii_only: bool, registry: Registry, keyring: KeyRing
) -> None:
    plan = make_plan(intent, [], registry, Policy())
    assert isinstance(plan, Plan)
    doc = signed_plan(plan, keyring)
    text = json.dumps(
        _shuffle_keys(doc, random.Random(seed)), indent=indent, ensure_ascii=ascii_only
    )
    verified = verify_signed_plan(json.loads(text), keys=keyring)
    assert verified.plan == plan
    assert verified.plan_hash == doc["plan_hash"]


def test_same_plan_same_signature(registry: Registry, keyring: KeyRing) -> None:
    from countersign.planner.testing import make_intent

    plan = make_plan(make_intent(), [], registry, Policy())
    assert isinstance(plan, Plan)
    assert signed_plan(plan, keyring) == signed_plan(plan, keyring)


@pytest.mark.parametrize(
    "doc",
    [
        [],
        {"plan": {}},
        {"signature": {}},
        {"plan": {}, "signature": {"algo": "RSA"}},
        {"plan": [], "signature": {}},
    ],
)
def test_malformed_documents_are_refused(doc: Any, keyring: KeyRing) -> None:
    with pytest.raises(MalformedEnvelopeError):
        verify_signed_plan(doc, keys=keyring)


def test_extra_top_level_field_is_refused(registry: Registry, keyring: KeyRing) -> None:
    from countersign.planner.testing import make_intent

    plan = make_plan(make_intent(), [], registry, Policy())
    assert isinstance(plan, Plan)
    doc = signed_plan(plan, keyring)
    with pytest.raises(MalformedEnvelopeError, match="unknown field"):
        verify_signed_plan({**doc, "approved": True}, keys=keyring)


def test_signature_from_another_key_fails(registry: Registry, keyring: KeyRing) -> None:
    import os

    from countersign.planner.testing import T0, make_intent

    other = KeyRing.from_seed(os.urandom(32), pubkey_id="k1", created_at=T0)
    plan = make_plan(make_intent(), [], registry, Policy())
    assert isinstance(plan, Plan)
    with pytest.raises(BadSignatureError):
        verify_signed_plan(signed_plan(plan, other), keys=keyring)
