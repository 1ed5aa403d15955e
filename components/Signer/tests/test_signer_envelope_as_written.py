"""The envelope is verified as written (issue 10, hole 5; Signer SPEC promise 2).

A verifier that normalizes first accepts envelopes the signer never writes. Each case here takes a
freshly signed plan and re-spells one field of its envelope (or its ``plan_hash``) in a way that
still means the same value to the model — another letter case, another UTC offset or precision,
another base64 alphabet or padding, a field left out or set to null — and checks that
verification refuses it. Where the re-spelling is one the model reads as the very same envelope,
the test first proves that (so the case is a real re-spelling, not a changed value).
"""

from __future__ import annotations

import base64
import string
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from countersign.kernel import (
    HashMismatchError,
    MalformedEnvelopeError,
    Plan,
    Policy,
    SignatureEnvelope,
    parse_contract,
)
from countersign.planner import make_plan
from countersign.planner.testing import make_intent, meeting_intents, signed_plan
from countersign.registry import Registry
from countersign.signer import KeyRing, verify_signed_plan

HC = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
_B64 = string.ascii_uppercase + string.ascii_lowercase + string.digits + "+/"
_MISSING = object()


def _flip_case(draw: st.DrawFn, text: str) -> str:
    letters = [i for i, c in enumerate(text) if c.isalpha()]
    assume(letters)
    chosen = draw(st.sets(st.sampled_from(letters), min_size=1))
    return "".join(c.swapcase() if i in chosen else c for i, c in enumerate(text))


@st.composite
def _ts_respelled(draw: st.DrawFn, ts: str) -> tuple[Any, bool]:
    """The same instant in another offset or precision (equivalent: the model reads it equal)."""
    instant = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    minutes = draw(st.integers(-(14 * 60) + 1, 14 * 60 - 1))
    local = instant.astimezone(timezone(timedelta(minutes=minutes)))
    spec = ["milliseconds", "microseconds"] + (["seconds"] if instant.microsecond == 0 else [])
    text = local.isoformat(timespec=draw(st.sampled_from(spec)))
    if minutes == 0 and draw(st.booleans()):
        text = text.removesuffix("+00:00") + "Z"
    assume(text != ts)
    return text, True


@st.composite
def _signature_respelled(draw: st.DrawFn, sig: str) -> tuple[Any, bool]:
    """The same 64 bytes in other base64: padding bits, URL-safe alphabet, padding, line breaks."""
    how = draw(st.sampled_from(["padding_bits", "urlsafe", "unpadded", "extra_pad", "newline"]))
    if how == "padding_bits":
        # The 86th character carries 2 bits of the last byte and 4 padding bits; any character
        # with the same top 2 bits decodes to the same bytes.
        i = _B64.index(sig[85])
        j = draw(st.sampled_from([k for k in range(64) if k >> 4 == i >> 4 and k != i]))
        out = sig[:85] + _B64[j] + sig[86:]
        assert base64.b64decode(out) == base64.b64decode(sig)
        return out, True
    if how == "urlsafe":
        assume("+" in sig or "/" in sig)
        return sig.translate(str.maketrans("+/", "-_")), False
    if how == "unpadded":
        return sig.rstrip("="), False
    if how == "extra_pad":
        return sig + "==", False
    at = draw(st.integers(1, len(sig) - 3))
    return sig[:at] + "\n" + sig[at:], False


@st.composite
def _respellings(
    draw: st.DrawFn, env: dict[str, Any], kind: str, name: str
) -> tuple[str, Any, bool]:
    """(field, new value or _MISSING, whether the model reads the new envelope as the old)."""
    if kind in {"missing", "null"}:
        # A missing algo is filled in by the model's default: the same envelope once read.
        return name, _MISSING if kind == "missing" else None, (name, kind) == ("algo", "missing")
    if name == "nonce":
        return "nonce", _flip_case(draw, env["nonce"]), True
    if name == "ts":
        return ("ts", *draw(_ts_respelled(env["ts"])))
    if name == "signature":
        return ("signature", *draw(_signature_respelled(env["signature"])))
    return "algo", draw(st.sampled_from(["ed25519", "ED25519", "Ed25519 ", "EdDSA"])), False


def _with(env: dict[str, Any], field: str, value: Any) -> dict[str, Any]:
    out = {k: v for k, v in env.items() if k != field}
    if value is not _MISSING:
        out[field] = value
    return out


_FIELDS = ["algo", "signer", "ts", "nonce", "signature", "pubkey_id"]
_KINDS = [
    *[("missing", f) for f in _FIELDS],
    *[("null", f) for f in _FIELDS],
    ("respelled", "nonce"),
    ("respelled", "ts"),
    ("respelled", "signature"),
    ("respelled", "algo"),
]


@pytest.mark.parametrize(("kind", "name"), _KINDS, ids=[f"{k}-{f}" for k, f in _KINDS])
@settings(max_examples=60, deadline=None, suppress_health_check=HC)
@given(intent=meeting_intents(), data=st.data())
def test_every_respelled_envelope_is_refused(
    kind: str, name: str, intent: Any, data: st.DataObject, registry: Registry, keyring: KeyRing
) -> None:
    plan = make_plan(intent, [], registry, Policy())
    assert isinstance(plan, Plan)
    doc = signed_plan(plan, keyring)
    field, value, equivalent = data.draw(_respellings(doc["signature"], kind, name))
    event(f"{field} {'same value' if equivalent else 'refused by the schema'}")
    env = _with(doc["signature"], field, value)
    assert env != doc["signature"]
    if equivalent:
        # The re-spelling means the same envelope (the same bytes, for the base64 signature,
        # which the message does not cover): a verifier that normalizes would accept it.
        read = parse_contract(SignatureEnvelope, env, what="signature").to_json()
        if field == "signature":
            assert base64.b64decode(read.pop("signature")) == base64.b64decode(
                doc["signature"]["signature"]
            )
            assert read == {k: v for k, v in doc["signature"].items() if k != "signature"}
        else:
            assert read == doc["signature"]
    with pytest.raises(MalformedEnvelopeError) as info:
        verify_signed_plan({**doc, "signature": env}, keys=keyring)
    assert field in info.value.message


@st.composite
def _plan_hash_respelled(draw: st.DrawFn, digest: str) -> Any:
    how = draw(st.sampled_from(["missing", "null", "upper", "prefixed", "padded", "number"]))
    if how == "missing":
        return _MISSING
    if how == "null":
        return None
    if how == "upper":
        return _flip_case(draw, digest)
    if how == "prefixed":
        return draw(st.sampled_from(["sha256:", "0x", " "])) + digest
    if how == "padded":
        return digest + draw(st.sampled_from([" ", "\n", "\x00"]))
    return draw(st.sampled_from([0, 1, True, [], {}]))


@settings(max_examples=100, deadline=None, suppress_health_check=HC)
@given(intent=meeting_intents(), data=st.data())
def test_plan_hash_must_be_present_and_exactly_the_hash(
    intent: Any, data: st.DataObject, registry: Registry, keyring: KeyRing
) -> None:
    plan = make_plan(intent, [], registry, Policy())
    assert isinstance(plan, Plan)
    doc = signed_plan(plan, keyring)
    value = data.draw(_plan_hash_respelled(doc["plan_hash"]))
    variant = _with(doc, "plan_hash", value)
    with pytest.raises((MalformedEnvelopeError, HashMismatchError)) as info:
        verify_signed_plan(variant, keys=keyring)
    assert "plan_hash" in info.value.message


def test_the_envelope_as_written_verifies(registry: Registry, keyring: KeyRing) -> None:
    """The control: exactly what sign_plan wrote verifies (the refusals above are not blanket)."""
    plan = make_plan(make_intent(), [], registry, Policy())
    assert isinstance(plan, Plan)
    doc = signed_plan(plan, keyring)
    verified = verify_signed_plan(doc, keys=keyring)
    assert verified.envelope.to_json() == doc["signature"]
    assert doc["signature"]["ts"].endswith("Z") and doc["signature"]["nonce"].isupper()
    assert datetime.fromisoformat(doc["signature"]["ts"]).tzinfo == UTC
