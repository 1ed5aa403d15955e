"""Receipt bundles under attack (Signer SPEC §5): any change fails, naming the first bad link."""

from __future__ import annotations

import copy
import json
import os
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from countersign.kernel import (
    DuplicateKeyError,
    SignatureError,
    canonical_bytes,
    content_hash,
)
from countersign.planner.testing import T0, make_intent, signed_plan
from countersign.registry import Registry
from countersign.signer import (
    DOMAIN,
    KeyRing,
    ReceiptBundleError,
    ReceiptInvalidError,
    ReceiptKeySigner,
    load_bundle,
    make_bundle,
    verify_bundle,
)

HC = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
#: gate, decision, choice of each receipt of the test chain
DECISIONS = [
    ("gate-A", "approved", {"item": "cable-b"}),
    ("gate-A", "approved", {"item": "cable-a"}),
    ("gate-B", "approved", None),
    ("gate-B", "rejected", None),
]


def _signed_plan(registry: Registry, ring: KeyRing, **entities: Any) -> dict[str, Any]:
    intent = make_intent("purchase_item")
    if entities:
        intent = make_intent("purchase_item", entities={**intent.entities, **entities})
    return signed_plan(intent, ring, registry)


def _chain(
    doc: dict[str, Any], ring: KeyRing, decisions: list[tuple[str, str, Any]] = DECISIONS
) -> list[dict[str, Any]]:
    signer = ReceiptKeySigner(ring)
    out: list[dict[str, Any]] = []
    previous = None
    for seq, (gate, decision, choice) in enumerate(decisions, 1):
        signed = signer.sign_receipt(
            plan_id=doc["plan"]["plan_id"],
            plan_hash=doc["plan_hash"],
            gate_id=gate,
            user_id="u-alice",
            choice_hash=content_hash(choice),
            decision=decision,
            decided_at=T0 + timedelta(seconds=seq),
            token_id=f"{seq:012x}" if decision == "approved" else None,
            previous_receipt_hash=previous,
            seq=seq,
        )
        previous = signed.receipt_hash
        out.append(signed.to_json())
    return out


def _bundle(registry: Registry, ring: KeyRing, **entities: Any) -> dict[str, Any]:
    doc = _signed_plan(registry, ring, **entities)
    b = make_bundle(doc, _chain(doc, ring), signer=ReceiptKeySigner(ring), exported_at=T0)
    read: dict[str, Any] = load_bundle(json.dumps(b, indent=1))  # as read from a file
    return read


@pytest.fixture(scope="module")
def bundle(registry: Registry, keyring: KeyRing) -> dict[str, Any]:
    return _bundle(registry, keyring)


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
    """A value that differs from ``value`` as JSON data (one byte and more)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1 + choice % 3
    if isinstance(value, str):
        if value and choice % 3 == 0:  # one character changed in place
            i = choice % len(value)
            return value[:i] + ("0" if value[i] != "0" else "1") + value[i + 1 :]
        return value + "x" if choice % 2 else "Y" + value
    if value is None:
        return "0" * 64 if choice % 2 else 0
    if isinstance(value, list):
        return value[:-1] if value and choice % 2 else [*value, "extra"]
    if isinstance(value, dict):
        if value and choice % 2:
            k = sorted(value)[choice % len(value)]
            return {kk: vv for kk, vv in value.items() if kk != k}
        return {**value, "added_key": choice}
    raise AssertionError(type(value))


def _set(doc: Any, path: tuple[Any, ...], new: Any) -> Any:
    parent = _get(doc, path[:-1])
    parent[path[-1]] = new
    return doc


def test_a_bundle_verifies_offline(bundle: dict[str, Any]) -> None:
    report = verify_bundle(bundle)
    assert report.plan_id == bundle["signed_plan"]["plan"]["plan_id"]
    assert report.receipts == 4
    assert report.keys == ("k1",)
    assert [(s, g, d) for s, g, d, _, _ in report.decisions] == [
        (1, "gate-A", "approved"),
        (2, "gate-A", "approved"),
        (3, "gate-B", "approved"),
        (4, "gate-B", "rejected"),
    ]
    assert bundle["receipts"][0]["receipt"]["previous_receipt_hash"] is None
    verify_bundle(bundle, trusted=bundle["public_keys"])


@settings(max_examples=200, deadline=None, suppress_health_check=HC)
@given(entry=st.integers(0, 3), pick=st.integers(0, 10**6), choice=st.integers(0, 100))
def test_any_change_of_any_receipt_names_that_receipt(
    bundle: dict[str, Any], entry: int, pick: int, choice: int
) -> None:
    tampered = copy.deepcopy(bundle)
    paths = _paths(tampered["receipts"][entry])
    path = ("receipts", entry, *paths[pick % len(paths)])
    _set(tampered, path, _mutate(_get(tampered, path), choice))
    assert canonical_bytes(tampered) != canonical_bytes(bundle)
    with pytest.raises(ReceiptInvalidError) as e:
        verify_bundle(tampered)
    assert e.value.message.startswith(f"receipt {entry + 1}"), e.value.message


@settings(max_examples=150, deadline=None, suppress_health_check=HC)
@given(pick=st.integers(0, 10**6), choice=st.integers(0, 100))
def test_any_change_of_the_plan_fails_as_the_signed_plan(
    bundle: dict[str, Any], pick: int, choice: int
) -> None:
    tampered = copy.deepcopy(bundle)
    paths = _paths(tampered["signed_plan"])[1:]
    path = ("signed_plan", *paths[pick % len(paths)])
    _set(tampered, path, _mutate(_get(tampered, path), choice))
    with pytest.raises(SignatureError) as e:
        verify_bundle(tampered)
    assert e.value.message.startswith("signed plan:"), e.value.message


@settings(max_examples=60, deadline=None, suppress_health_check=HC)
@given(pick=st.integers(0, 10**6), choice=st.integers(0, 100))
def test_any_change_of_the_head_fails_as_the_head(
    bundle: dict[str, Any], pick: int, choice: int
) -> None:
    tampered = copy.deepcopy(bundle)
    paths = _paths(tampered["head"])[1:]
    path = ("head", *paths[pick % len(paths)])
    _set(tampered, path, _mutate(_get(tampered, path), choice))
    with pytest.raises(ReceiptInvalidError, match=r"^head: "):
        verify_bundle(tampered)


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda r: r[1:], r"^receipt 1 \(gate-A approved\): seq is 2, expected 1"),
        (
            lambda r: [r[0], r[2], r[3]],
            r"^receipt 2 \(gate-B approved\): seq is 3, expected 2",
        ),
        (
            lambda r: [r[0], r[2], r[1], r[3]],
            r"^receipt 2 \(gate-B approved\): seq is 3, expected 2",
        ),
        (lambda r: [r[0], r[0], *r[1:]], r"^receipt 2 \(gate-A approved\): seq is 1, expected 2"),
        (lambda r: r[:3], r"^head: names 4 receipts, the bundle holds 3 \(receipts were cut off"),
        (lambda r: [], r"^head: names 4 receipts, the bundle holds 0"),
        (lambda r: [*r, r[3]], r"^receipt 5 \(gate-B rejected\): seq is 4, expected 5"),
    ],
    ids=["drop-first", "drop-middle", "reorder", "duplicate", "drop-last", "drop-all", "append"],
)
def test_dropped_reordered_duplicated_receipts_name_the_link(
    bundle: dict[str, Any], edit: Any, expected: str
) -> None:
    tampered = copy.deepcopy(bundle)
    tampered["receipts"] = edit(tampered["receipts"])
    with pytest.raises(ReceiptInvalidError, match=expected):
        verify_bundle(tampered)


def test_a_resequenced_chain_still_fails_at_the_link(
    registry: Registry, keyring: KeyRing, bundle: dict[str, Any]
) -> None:
    """Someone with the key could re-sign; without it, renumbering after a drop breaks the
    signature of the renumbered receipt, and the link check names the gap."""
    tampered = copy.deepcopy(bundle)
    del tampered["receipts"][1]
    tampered["receipts"][1]["receipt"]["seq"] = 2
    with pytest.raises(ReceiptInvalidError, match=r"^receipt 2 \(gate-B approved\): the signature"):
        verify_bundle(tampered)
    # re-signed by the key holder with seq 2 but the old link: the previous hash names the gap
    doc = bundle["signed_plan"]
    chain = _chain(doc, keyring)
    forged = ReceiptKeySigner(keyring).sign_receipt(
        **{**chain[2]["receipt"], "seq": 2, "decided_at": T0 + timedelta(seconds=3)}
    )
    tampered = copy.deepcopy(bundle)
    tampered["receipts"] = [chain[0], forged.to_json()]
    with pytest.raises(
        ReceiptInvalidError,
        match=r"^receipt 2 \(gate-B approved\): previous_receipt_hash does not match receipt 1",
    ):
        verify_bundle(tampered)


def test_a_receipt_moved_to_another_plans_bundle_fails(
    registry: Registry, keyring: KeyRing, bundle: dict[str, Any]
) -> None:
    other = _bundle(registry, keyring, query="hdmi cable")
    assert other["signed_plan"]["plan_hash"] != bundle["signed_plan"]["plan_hash"]
    for i in range(4):
        moved = copy.deepcopy(bundle)
        moved["receipts"][i] = other["receipts"][i]
        with pytest.raises(ReceiptInvalidError, match=rf"^receipt {i + 1} \(gate-. \w+\): plan_id"):
            verify_bundle(moved)
    moved = copy.deepcopy(bundle)
    moved["head"] = other["head"]
    with pytest.raises(ReceiptInvalidError, match=r"^head: names plan"):
        verify_bundle(moved)


def test_keys_the_reader_does_not_trust_or_nothing_uses_fail(bundle: dict[str, Any]) -> None:
    stranger = KeyRing.from_seed(os.urandom(32), pubkey_id="k1", created_at=T0)
    trusted = {"k1": stranger.infos()[0].public_key}
    with pytest.raises(ReceiptInvalidError, match=r"^public_keys\.k1: not the trusted key"):
        verify_bundle(bundle, trusted=trusted)
    extra = copy.deepcopy(bundle)
    extra["public_keys"]["k9"] = trusted["k1"]
    with pytest.raises(ReceiptInvalidError, match=r"^public_keys: \['k9'\]"):
        verify_bundle(extra)
    swapped = copy.deepcopy(bundle)
    swapped["public_keys"]["k1"] = trusted["k1"]  # every signature now fails: the plan's first
    with pytest.raises(SignatureError, match=r"^signed plan: "):
        verify_bundle(swapped)


def test_a_receipt_signature_is_not_a_plan_signature(bundle: dict[str, Any]) -> None:
    """Domain separation: the plan's signature bytes over the receipt (or the reverse) fail."""
    tampered = copy.deepcopy(bundle)
    tampered["receipts"][0]["signature"]["signature"] = bundle["signed_plan"]["signature"][
        "signature"
    ]
    with pytest.raises(ReceiptInvalidError, match=r"^receipt 1 .*does not hold"):
        verify_bundle(tampered)
    assert DOMAIN != b"countersign/receipt/v1\x00"


def test_a_decision_after_a_rejection_of_the_gate_fails(
    registry: Registry, keyring: KeyRing
) -> None:
    doc = _signed_plan(registry, keyring)
    chain = _chain(doc, keyring, [("gate-A", "rejected", None), ("gate-A", "approved", {"x": 1})])
    b = make_bundle(doc, chain, signer=ReceiptKeySigner(keyring), exported_at=T0)
    with pytest.raises(ReceiptInvalidError, match=r"^receipt 2 \(gate-A approved\): gate-A was"):
        verify_bundle(b)
    bad_gate = _chain(doc, keyring, [("gate-Z", "approved", None)])
    b = make_bundle(doc, bad_gate, signer=ReceiptKeySigner(keyring), exported_at=T0)
    with pytest.raises(ReceiptInvalidError, match=r"^receipt 1 \(gate-Z approved\): gate_id"):
        verify_bundle(b)


def test_duplicate_keys_and_non_bundles_are_refused(bundle: dict[str, Any]) -> None:
    text = json.dumps(bundle)
    # the same key twice inside a receipt (the altered value last: a naive parser keeps it)
    doubled = text.replace('"seq": 1', '"seq": 1, "seq": 2', 1)
    assert doubled != text
    with pytest.raises(DuplicateKeyError, match="seq"):
        load_bundle(doubled)
    escaped = text.replace(
        '"decision": "approved"', '"decision": "approved", "decisio\\u006e": "x"', 1
    )
    with pytest.raises(DuplicateKeyError):
        load_bundle(escaped)
    not_one: Any
    for not_one in ([], {"signed_plan": {}}, {**bundle, "extra": 1}, {**bundle, "receipts": {}}):
        with pytest.raises(ReceiptBundleError):
            verify_bundle(not_one)
    with pytest.raises(ReceiptBundleError, match=r"public_keys\.k1"):
        verify_bundle({**bundle, "public_keys": {"k1": "AAAA"}})
