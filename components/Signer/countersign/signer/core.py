"""Sign and verify plans: RFC 8785 canonical bytes -> sha256 plan hash -> Ed25519 (PyNaCl).

Invariants (Signer SPEC §2):
- The same plan gives the same canonical bytes, hash and signature (Ed25519 is deterministic,
  and the envelope's ``ts`` and ``nonce`` are derived from the plan, not from a clock).
- Verification canonicalizes the plan *as it was read* (not a re-parsed model), so a reformatted
  but identical plan verifies and any change of content — a value, an order, an added or removed
  key — fails.
- The envelope is checked *as written* (SPEC promise 2): each field present and spelled exactly
  as ``sign_plan`` writes it (no other letter case, offset, precision, base64 alphabet or
  padding, no defaults filled in), and ``plan_hash`` present and equal to the recomputed hash.
  A verifier that normalizes first accepts documents the signer never wrote.
- Verification raises a typed error; it never returns a bool.
- Ed25519 runs once per (public key, message, signature) per process: ``PROVEN`` remembers the
  triples this process signed or saw verify (``proven.py`` says why that is a fact, not a trust).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from nacl.exceptions import BadSignatureError as NaclBadSignature
from nacl.signing import SigningKey, VerifyKey

from countersign.kernel import (
    BadSignatureError,
    ContractError,
    HashMismatchError,
    MalformedEnvelopeError,
    Plan,
    SignatureEnvelope,
    SignedPlan,
    canonical_bytes,
    derived_ulid,
    format_utc,
    parse_contract,
    sha256_hex,
)

from .proven import ProvenSignatures

__all__ = [
    "DOMAIN",
    "PROVEN",
    "KeyLookup",
    "VerifiedPlan",
    "plan_hash",
    "sign_plan",
    "signing_message",
    "verify_signed_plan",
]

#: Domain separation: a signature over a Countersign plan can never be replayed as a signature
#: over some other kind of document signed with the same key.
DOMAIN = b"countersign/plan/v1\x00"

#: The Ed25519 triples this process signed or saw verify (``proven.py``).
PROVEN = ProvenSignatures()


class KeyLookup(Protocol):
    """Finds the verify key for a ``pubkey_id``; raises UnknownKeyError / KeyRevokedError."""

    def verify_key(self, pubkey_id: str) -> VerifyKey: ...


@dataclass(frozen=True, slots=True)
class VerifiedPlan:
    """A plan whose signature held. Only ``verify_signed_plan`` makes these."""

    plan: Plan
    plan_hash: str
    envelope: SignatureEnvelope
    canonical: bytes

    def signed(self) -> SignedPlan:
        """The verified plan as a ``SignedPlan``."""
        return SignedPlan.of(self.plan, self.envelope, self.plan_hash, self.canonical)

    def document(self) -> dict[str, Any]:
        """The signed-plan document (``{"plan", "signature", "plan_hash"}``)."""
        return self.signed().to_json()


def plan_hash(plan: Plan | Mapping[str, Any]) -> str:
    """sha256 hex of the plan's canonical bytes."""
    data = plan.to_json() if isinstance(plan, Plan) else plan
    return sha256_hex(canonical_bytes(data))


def signing_message(envelope_fields: Mapping[str, Any], digest: str) -> bytes:
    """The exact bytes that get signed: domain tag + canonical {envelope fields, plan_hash}."""
    body = {k: v for k, v in envelope_fields.items() if k != "signature"}
    body["plan_hash"] = digest
    return DOMAIN + canonical_bytes(body)


def sign_plan(plan: Plan, *, key: SigningKey, pubkey_id: str, signer: str) -> SignedPlan:
    """Sign a plan.

    Args:
        plan: the plan to sign.
        key: the Ed25519 signing key.
        pubkey_id: the key's name in the key ring.
        signer: who signs (``planner@system``).

    Returns:
        The ``SignedPlan`` (its ``to_json()`` is the signed-plan document).
    """
    data = canonical_bytes(plan.to_json())
    digest = sha256_hex(data)
    ts = plan.meta.created_at
    fields: dict[str, Any] = {
        "algo": "Ed25519",
        "signer": signer,
        "ts": format_utc(ts),
        "nonce": derived_ulid(ts, digest.encode(), pubkey_id.encode()),
        "pubkey_id": pubkey_id,
    }
    message = signing_message(fields, digest)
    sig = key.sign(message).signature
    PROVEN.add(bytes(key.verify_key), message, sig)
    fields["signature"] = base64.b64encode(sig).decode("ascii")
    return SignedPlan.of(plan, SignatureEnvelope.model_validate(fields), digest, data)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_as_written(raw_env: Mapping[str, Any], written: Mapping[str, Any]) -> None:
    """Every envelope field present and spelled as ``sign_plan`` writes it (SPEC promise 2).

    ``written`` is the parsed envelope's ``to_json()``. The model normalizes (upper-cases a ULID,
    moves a timestamp to UTC milliseconds, fills in ``algo``); that normal form is the one
    spelling the signer writes, so anything else in the document is refused rather than
    normalized into acceptance.
    """
    for name, value in written.items():
        if name not in raw_env:
            raise MalformedEnvelopeError(
                f"signature: missing field {name!r} (the signer always writes it)"
            )
        found = raw_env[name]
        if type(found) is not type(value) or found != value:
            raise MalformedEnvelopeError(
                f"signature.{name}: found {_short(found)}, expected {_short(value)} "
                "(the one spelling the signer writes for this value)"
            )
    sig = written["signature"]
    try:
        canonical = base64.b64encode(base64.b64decode(sig, validate=True)).decode("ascii")
    except (binascii.Error, ValueError) as e:
        raise MalformedEnvelopeError(f"signature.signature: not base64: {e}") from e
    if canonical != sig:
        raise MalformedEnvelopeError(
            f"signature.signature: found {_short(sig)}, expected {_short(canonical)} "
            "(standard base64 with zero padding bits, as the signer writes it)"
        )


def verify_signed_plan(document: Any, *, keys: KeyLookup) -> VerifiedPlan:
    """Verify a signed-plan document as read from JSON (parse it with ``loads_strict``).

    The checks run in this order, each raising at the first failure: the document's shape
    (``_parts``), the envelope as written (``_envelope``), the plan's hash (``_digest``), the
    signature (``_check_signature``), the plan contract and its normal form (``_plan``).

    Args:
        document: decoded JSON: ``{"plan": {...}, "signature": {...}, "plan_hash": "..."}``.
            All three are required; the envelope and ``plan_hash`` must be exactly as
            ``sign_plan`` wrote them. A ``SignedPlan`` is accepted and verified as its
            ``to_json()`` document: the checks of how a document is spelled then hold trivially
            (a model has no spelling of its own), so callers holding raw bytes verify the bytes
            (Kernel LLD §5); only the signed content can ever come back either way.
        keys: where to find the verify key named by ``signature.pubkey_id``.

    Raises:
        MalformedEnvelopeError: not a signed-plan document, the envelope breaks its schema or is
            not spelled as the signer writes it, or ``plan_hash`` is missing or not a string.
        HashMismatchError: the stated ``plan_hash`` is not the hash of the plan.
        UnknownKeyError / KeyRevokedError: from ``keys``.
        BadSignatureError: the signature does not hold over this plan.
    """
    raw_plan, raw_env, stated = _parts(document)
    envelope, written = _envelope(raw_env)
    data, digest = _digest(raw_plan, stated)
    _check_signature(envelope, written, digest, keys, plan_id=raw_plan.get("plan_id"))
    plan = _plan(raw_plan, data)
    return VerifiedPlan(plan=plan, plan_hash=digest, envelope=envelope, canonical=data)


def _parts(document: Any) -> tuple[Mapping[str, Any], Mapping[str, Any], str]:
    """The plan, the envelope and the stated hash of a signed-plan document (Signer SPEC §2)."""
    if isinstance(document, SignedPlan):
        document = document.to_json()
    if not isinstance(document, Mapping):
        raise MalformedEnvelopeError("signed plan must be a JSON object")
    extra = set(document) - {"plan", "signature", "plan_hash"}
    if extra:
        raise MalformedEnvelopeError(f"unknown field(s) in signed plan: {sorted(extra)}")
    raw_plan = document.get("plan")
    raw_env = document.get("signature")
    if not isinstance(raw_plan, Mapping):
        raise MalformedEnvelopeError("signed plan has no 'plan' object")
    if not isinstance(raw_env, Mapping):
        raise MalformedEnvelopeError("signed plan has no 'signature' object")
    if "plan_hash" not in document:
        raise MalformedEnvelopeError("signed plan has no 'plan_hash' (the signer always writes it)")
    stated = document["plan_hash"]
    if not isinstance(stated, str):
        raise MalformedEnvelopeError(
            f"plan_hash: found {_short(stated)}, expected a string of 64 lower-case hex digits"
        )
    return raw_plan, raw_env, stated


def _envelope(raw_env: Mapping[str, Any]) -> tuple[SignatureEnvelope, dict[str, Any]]:
    """The envelope, parsed and checked as written; with its ``to_json()`` (computed once: the
    as-written check and the signed message both read it)."""
    try:
        envelope = parse_contract(SignatureEnvelope, raw_env, what="signature")
    except ContractError as e:
        raise MalformedEnvelopeError(e.message) from e
    written = envelope.to_json()
    _check_as_written(raw_env, written)
    return envelope, written


def _digest(raw_plan: Mapping[str, Any], stated: str) -> tuple[bytes, str]:
    """The plan's canonical bytes as read and their hash, which must be the stated one."""
    try:
        data = canonical_bytes(raw_plan)
    except ContractError as e:
        raise MalformedEnvelopeError(f"plan cannot be canonicalized: {e.message}") from e
    digest = sha256_hex(data)
    if stated != digest:
        raise HashMismatchError(
            f"plan_hash {stated[:16]}… stated, {digest[:16]}… computed from the plan"
        )
    return data, digest


def _check_signature(
    envelope: SignatureEnvelope,
    written: Mapping[str, Any],
    digest: str,
    keys: KeyLookup,
    *,
    plan_id: Any,
) -> None:
    """The envelope's signature holds over the signing message (Ed25519 once per triple per
    process: ``PROVEN``)."""
    verify_key = keys.verify_key(envelope.pubkey_id)
    try:
        sig = base64.b64decode(envelope.signature, validate=True)
        message = signing_message(written, digest)
        public_key = bytes(verify_key)
        if (public_key, message, sig) not in PROVEN:
            verify_key.verify(message, sig)
            PROVEN.add(public_key, message, sig)
    except (NaclBadSignature, binascii.Error, ValueError) as e:
        raise BadSignatureError(
            f"signature by key {envelope.pubkey_id!r} does not hold over plan "
            f"{plan_id!r} (hash {digest[:16]}…)"
        ) from e


def _plan(raw_plan: Mapping[str, Any], data: bytes) -> Plan:
    """The signed plan as a ``Plan``, whose canonical bytes must be the ones verified."""
    try:
        plan = parse_contract(Plan, raw_plan, what="plan")
    except ContractError as e:
        raise MalformedEnvelopeError(f"signed plan breaks the plan contract: {e.message}") from e
    if canonical_bytes(plan.to_json()) != data:
        raise MalformedEnvelopeError(
            "signed plan is not in normal form (its parsed content differs from its bytes)"
        )
    return plan
