"""Signed approval receipts and the offline bundle check (Signer SPEC §5, GLOBAL_SPEC §8).

Every gate decision (an approval with the hash of its choice, a rejection) becomes a *receipt*
signed with the service's Ed25519 key, the same key ring as plans::

    receipt   = {plan_id, plan_hash, gate_id, user_id, choice_hash, decision, decided_at,
                 token_id, previous_receipt_hash, seq}
    signature = {algo: "Ed25519", pubkey_id, signature: <base64, 64 bytes>}
    message   = b"countersign/receipt/v1\\x00" || canonical(receipt)

The receipts of one plan form a chain: ``seq`` counts from 1 and ``previous_receipt_hash`` is the
sha256 hex of the previous entry's canonical signed form (``canonical({"receipt", "signature"})``,
:func:`receipt_hash`); the first receipt's is ``null`` (no predecessor, rather than a made-up
all-zero hash that a reader could mistake for one). A *bundle* carries a plan's whole story::

    {"signed_plan": <the signed-plan document as stored>,
     "receipts": [{"receipt": {...}, "signature": {...}}, ...],
     "head": {"statement": {plan_id, plan_hash, receipts, last_receipt_hash, exported_at},
              "signature": {...}},
     "public_keys": {"<pubkey_id>": "<base64 of the raw 32-byte Ed25519 public key>"}}

The chain alone cannot show that receipts were cut off its end (a later rejection, or a gate
decided again with another choice, would vanish unnoticed), so the exporter signs a *head*: how
many receipts the chain held at ``exported_at`` and the last one's hash (domain
``countersign/receipt-head/v1``). An older export stays what it was: a true statement about the
chain at its own ``exported_at``.

Invariant: :func:`verify_bundle` needs nothing but the bundle (no database, no network, no key
ring): it verifies the signed plan with the bundle's keys, then every receipt's signature and its
place in the chain, and raises :class:`ReceiptInvalidError` naming the **first** bad link. It
never returns a bool. Which keys to trust is the reader's decision: ``trusted=`` pins them
(otherwise the report lists the keys the bundle was checked with).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypedDict, Unpack

from nacl.exceptions import BadSignatureError as NaclBadSignature
from nacl.signing import SigningKey, VerifyKey

from countersign.kernel import (
    ContractError,
    SignatureError,
    UnknownKeyError,
    canonical_bytes,
    content_hash,
    format_utc,
    loads_strict,
)

from .core import VerifiedPlan, verify_signed_plan
from .errors import ReceiptBundleError, ReceiptInvalidError
from .keyring import KeyRing

__all__ = [
    "HEAD_DOMAIN",
    "RECEIPT_DOMAIN",
    "RECEIPT_FIELDS",
    "BundleKeys",
    "BundleReport",
    "ReceiptFields",
    "ReceiptKeySigner",
    "SignedReceipt",
    "load_bundle",
    "make_bundle",
    "make_receipt",
    "receipt_hash",
    "sign_receipt",
    "verify_bundle",
]

#: Domain separation: a receipt signature is never valid as a plan signature, nor the reverse.
RECEIPT_DOMAIN = b"countersign/receipt/v1\x00"
#: The export head's domain (a head is never a receipt, nor the reverse).
HEAD_DOMAIN = b"countersign/receipt-head/v1\x00"


class ReceiptFields(TypedDict):
    """The fields of one gate decision's receipt, exactly (the one definition: ``make_receipt``,
    ``ReceiptKeySigner.sign_receipt`` and the Approvals ``ReceiptSigner`` seam take these as
    keyword arguments). ``decided_at`` is a datetime here; the receipt spells it in UTC."""

    plan_id: str
    plan_hash: str
    gate_id: str
    user_id: str
    choice_hash: str
    decision: str
    decided_at: datetime
    token_id: str | None
    previous_receipt_hash: str | None
    seq: int


#: The receipt's fields, exactly (a receipt with any other key set is refused).
RECEIPT_FIELDS: tuple[str, ...] = tuple(ReceiptFields.__annotations__)

_BUNDLE_FIELDS = {"signed_plan", "receipts", "head", "public_keys"}
_HEAD_FIELDS = {"plan_id", "plan_hash", "receipts", "last_receipt_hash", "exported_at"}
_ENTRY_FIELDS = {"receipt", "signature"}
_SIGNATURE_FIELDS = {"algo", "pubkey_id", "signature"}
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_HEX12 = re.compile(r"^[0-9a-f]{12}$")
_GATE = re.compile(r"^gate-[A-Z]{1,3}$")


@dataclass(frozen=True, slots=True)
class SignedReceipt:
    """One link of a plan's receipt chain: the receipt, its signature and the link's hash."""

    receipt: dict[str, Any]
    signature: dict[str, Any]
    receipt_hash: str

    def to_json(self) -> dict[str, Any]:
        """The bundle entry ``{"receipt", "signature"}``."""
        return {"receipt": self.receipt, "signature": self.signature}


def make_receipt(**fields: Unpack[ReceiptFields]) -> dict[str, Any]:
    """The receipt document of one gate decision (every field a string, ``null`` or ``seq``).

    Raises:
        ContractError: not exactly the receipt's fields, ``decision`` is not approved/rejected
            or ``seq`` is not positive.
    """
    if set(fields) != set(RECEIPT_FIELDS):
        raise ContractError(
            f"receipt fields {sorted(fields)}: expected exactly {sorted(RECEIPT_FIELDS)}"
        )
    if fields["decision"] not in {"approved", "rejected"}:
        raise ContractError(
            f"receipt decision {fields['decision']!r}: expected 'approved' or 'rejected'"
        )
    if fields["seq"] < 1:
        raise ContractError(f"receipt seq {fields['seq']}: expected 1 or more")
    given: dict[str, Any] = dict(fields)
    receipt = {name: given[name] for name in RECEIPT_FIELDS}  # in the documented order
    receipt["decided_at"] = format_utc(fields["decided_at"])
    return receipt


def receipt_message(receipt: Mapping[str, Any]) -> bytes:
    """The exact bytes a receipt signature covers: domain tag + canonical receipt."""
    return RECEIPT_DOMAIN + canonical_bytes(receipt)


def receipt_hash(entry: Mapping[str, Any]) -> str:
    """sha256 hex of a bundle entry's canonical signed form (what the next receipt links to)."""
    return content_hash({"receipt": entry["receipt"], "signature": entry["signature"]})


def _signature(message: bytes, key: SigningKey, pubkey_id: str) -> dict[str, Any]:
    sig = key.sign(message).signature
    return {
        "algo": "Ed25519",
        "pubkey_id": pubkey_id,
        "signature": base64.b64encode(sig).decode("ascii"),
    }


def sign_receipt(receipt: Mapping[str, Any], *, key: SigningKey, pubkey_id: str) -> SignedReceipt:
    """Sign a receipt with ``key`` (named ``pubkey_id`` in the key ring)."""
    signature = _signature(receipt_message(receipt), key, pubkey_id)
    body = dict(receipt)
    return SignedReceipt(body, signature, receipt_hash({"receipt": body, "signature": signature}))


class ReceiptKeySigner:
    """Signs receipts with the key ring's active key (the Approvals ``ReceiptSigner`` seam).

    The active key is looked up on every receipt, so a rotation takes effect at once."""

    def __init__(self, ring: KeyRing) -> None:
        self.ring = ring

    def sign_receipt(self, **fields: Unpack[ReceiptFields]) -> SignedReceipt:
        """Build and sign the receipt of one decision (``make_receipt`` + ``sign_receipt``)."""
        pubkey_id, key = self.ring.active()
        return sign_receipt(make_receipt(**fields), key=key, pubkey_id=pubkey_id)

    def sign_head(self, statement: Mapping[str, Any]) -> dict[str, Any]:
        """Sign an export head statement with the active key: ``{"statement", "signature"}``."""
        pubkey_id, key = self.ring.active()
        message = HEAD_DOMAIN + canonical_bytes(statement)
        return {"statement": dict(statement), "signature": _signature(message, key, pubkey_id)}


def make_bundle(
    signed_plan: Mapping[str, Any],
    receipts: Sequence[Mapping[str, Any]],
    *,
    signer: ReceiptKeySigner,
    exported_at: datetime,
) -> dict[str, Any]:
    """The bundle of one plan: its signed plan, its receipt chain in order, the signed head
    (how many receipts, the last one's hash, when), and the public key of every ``pubkey_id``
    the plan, the receipts and the head name (from the signer's key ring).

    Raises:
        UnknownKeyError / KeyRevokedError: a key the plan or a receipt names is gone.
        KeyRingError: no active key to sign the head.
    """
    entries = [{"receipt": r["receipt"], "signature": r["signature"]} for r in receipts]
    plan = signed_plan["plan"]
    head = signer.sign_head(
        {
            "plan_id": plan["plan_id"],
            "plan_hash": signed_plan["plan_hash"],
            "receipts": len(entries),
            "last_receipt_hash": receipt_hash(entries[-1]) if entries else None,
            "exported_at": format_utc(exported_at),
        }
    )
    used = {str(signed_plan["signature"]["pubkey_id"]), str(head["signature"]["pubkey_id"])}
    used |= {str(r["signature"]["pubkey_id"]) for r in entries}
    public = {
        pid: base64.b64encode(bytes(signer.ring.verify_key(pid))).decode("ascii")
        for pid in sorted(used)
    }
    return {
        "signed_plan": dict(signed_plan),
        "receipts": entries,
        "head": head,
        "public_keys": public,
    }


# ---- verification ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class BundleReport:
    """What a bundle proved: the plan, and each decision in chain order."""

    plan_id: str
    plan_hash: str
    #: ``(seq, gate_id, decision, user_id, decided_at)`` per receipt
    decisions: tuple[tuple[int, str, str, str, str], ...]
    #: the pubkey ids the bundle was verified with (each used by the plan or a receipt)
    keys: tuple[str, ...]

    @property
    def receipts(self) -> int:
        """How many receipts the chain holds."""
        return len(self.decisions)


class BundleKeys:
    """The bundle's own public keys as a ``KeyLookup`` (no key ring, no revocation list: the
    reader decides which keys to trust, ``verify_bundle(trusted=)``)."""

    def __init__(self, public_keys: Any) -> None:
        if not isinstance(public_keys, Mapping):
            raise ReceiptBundleError("bundle: public_keys must be an object of pubkey_id → key")
        self._keys = {pid: _public_key(pid, b64) for pid, b64 in public_keys.items()}
        self.used: set[str] = set()

    def verify_key(self, pubkey_id: str) -> VerifyKey:
        """The bundle's key named ``pubkey_id``.

        Raises:
            UnknownKeyError: the bundle carries no such key.
        """
        key = self._keys.get(pubkey_id)
        if key is None:
            known = ", ".join(sorted(self._keys)) or "none"
            raise UnknownKeyError(f"no key {pubkey_id!r} in the bundle's public_keys ({known})")
        self.used.add(pubkey_id)
        return key


def _public_key(pubkey_id: Any, b64: Any) -> VerifyKey:
    if not isinstance(pubkey_id, str) or not isinstance(b64, str):
        raise ReceiptBundleError("bundle: public_keys must map pubkey_id strings to strings")
    try:
        raw = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError) as e:
        raise ReceiptBundleError(f"bundle: public_keys.{pubkey_id}: not base64") from e
    if len(raw) != 32 or base64.b64encode(raw).decode("ascii") != b64:
        raise ReceiptBundleError(
            f"bundle: public_keys.{pubkey_id}: expected the standard base64 of 32 bytes"
        )
    return VerifyKey(raw)


def load_bundle(data: bytes | str, *, what: str = "bundle") -> Any:
    """Parse a bundle file strictly (``loads_strict``: one key once, UTF-8, bounded depth).

    Raises:
        DocumentError / DuplicateKeyError: as ``loads_strict``.
    """
    return loads_strict(data, what=what)


def verify_bundle(bundle: Any, *, trusted: Mapping[str, str] | None = None) -> BundleReport:
    """Verify a bundle offline: the signed plan, then every receipt in order.

    Args:
        bundle: the parsed bundle (``load_bundle``).
        trusted: when given, every key the bundle uses must be one of these (pubkey_id →
            base64), byte for byte.

    Raises:
        ReceiptBundleError: not a bundle (shape, key encoding).
        SignatureError subclasses: the signed plan does not verify (message starts
            ``signed plan:``, the code is the plan check's own).
        ReceiptInvalidError: the first receipt that does not hold, named with its place in the
            chain, its gate and decision, and what was expected vs found.
    """
    if not isinstance(bundle, Mapping) or set(bundle) != _BUNDLE_FIELDS:  # exactly these four
        found = sorted(bundle) if isinstance(bundle, Mapping) else type(bundle).__name__
        raise ReceiptBundleError(
            f"bundle: expected an object with exactly {sorted(_BUNDLE_FIELDS)}, found {found}"
        )
    receipts = bundle["receipts"]
    if not isinstance(receipts, list):
        raise ReceiptBundleError("bundle: receipts must be a list")
    keys = BundleKeys(bundle["public_keys"])
    try:
        verified = verify_signed_plan(bundle["signed_plan"], keys=keys)
    except SignatureError as e:
        raise type(e)(f"signed plan: {e.message}") from e
    chain = _Chain(verified)
    for i, entry in enumerate(receipts, 1):
        chain.check(i, entry, keys)
    _check_head(bundle["head"], chain, keys)
    _check_keys(bundle["public_keys"], keys.used, trusted)
    return BundleReport(
        plan_id=verified.plan.plan_id,
        plan_hash=verified.plan_hash,
        decisions=tuple(chain.decisions),
        keys=tuple(sorted(keys.used)),
    )


def _check_head(head: Any, chain: _Chain, keys: BundleKeys) -> None:
    """The signed head must name this plan and exactly this chain (nothing cut off its end)."""
    if not isinstance(head, Mapping) or set(head) != {"statement", "signature"}:
        raise ReceiptInvalidError("head: expected an object with exactly statement, signature")
    st = head["statement"]
    if not isinstance(st, Mapping) or set(st) != _HEAD_FIELDS:
        raise ReceiptInvalidError(f"head: statement must have exactly {sorted(_HEAD_FIELDS)}")
    _holds("head", HEAD_DOMAIN, st, head["signature"], keys)
    n = len(chain.decisions)
    if st["plan_id"] != chain.plan.plan.plan_id or st["plan_hash"] != chain.plan.plan_hash:
        raise ReceiptInvalidError(f"head: names plan {_short(st['plan_id'])}, not this bundle's")
    if type(st["receipts"]) is not int or st["receipts"] != n:
        cut = " (receipts were cut off the end of the chain)" if _more(st["receipts"], n) else ""
        raise ReceiptInvalidError(
            f"head: names {_short(st['receipts'])} receipts, the bundle holds {n}{cut}"
        )
    last = chain.previous[1] if chain.previous else None
    if st["last_receipt_hash"] != last:
        raise ReceiptInvalidError(
            f"head: last_receipt_hash does not match {chain.previous[0] if chain.previous else 'an empty chain'}"
        )
    if not _is_timestamp(st["exported_at"]):
        raise ReceiptInvalidError(
            f"head: exported_at {_short(st['exported_at'])} is not a timestamp"
        )


def _more(stated: Any, n: int) -> bool:
    return type(stated) is int and stated > n


def _check_keys(
    public: Mapping[str, str], used: set[str], trusted: Mapping[str, str] | None
) -> None:
    unused = sorted(set(public) - used)
    if unused:
        raise ReceiptInvalidError(
            f"public_keys: {unused} sign(s) nothing in the bundle (an exporter writes only the "
            "keys the plan and its receipts name)"
        )
    if trusted is None:
        return
    for pid in sorted(used):
        if trusted.get(pid) != public[pid]:
            raise ReceiptInvalidError(
                f"public_keys.{pid}: not the trusted key of that name (the bundle carries "
                f"{public[pid][:12]}…)"
            )


@dataclass
class _Chain:
    """The receipts seen so far: the previous link, the gates decided, the report."""

    plan: VerifiedPlan
    previous: tuple[str, str] | None = None  # (label, hash) of the previous receipt
    rejected: set[str] = field(default_factory=set)
    decisions: list[tuple[int, str, str, str, str]] = field(default_factory=list)

    def check(self, i: int, entry: Any, keys: BundleKeys) -> None:
        label = _label(i, entry)
        receipt = _entry_shape(label, entry)
        _holds(label, RECEIPT_DOMAIN, receipt, entry["signature"], keys)
        self._fields(label, i, receipt)
        self._links(label, receipt)
        self.previous = (f"receipt {i}", receipt_hash(entry))
        r = receipt
        self.decisions.append((i, r["gate_id"], r["decision"], r["user_id"], r["decided_at"]))

    def _fields(self, label: str, i: int, r: Mapping[str, Any]) -> None:
        seq = r["seq"]
        if type(seq) is not int or seq != i:
            raise ReceiptInvalidError(
                f"{label}: seq is {seq!r}, expected {i} (its place in the chain)"
            )
        plan = self.plan.plan
        if r["plan_id"] != plan.plan_id:
            raise ReceiptInvalidError(
                f"{label}: plan_id is {_short(r['plan_id'])}, the bundle's plan is {plan.plan_id}"
            )
        if r["plan_hash"] != self.plan.plan_hash:
            raise ReceiptInvalidError(
                f"{label}: plan_hash is {_short(r['plan_hash'])}, the signed plan's is "
                f"{self.plan.plan_hash[:16]}…"
            )
        gates = sorted(s.gate_id for s in plan.graph if s.gate_id)
        if r["gate_id"] not in gates:
            raise ReceiptInvalidError(
                f"{label}: gate_id {_short(r['gate_id'])} is not a gate of the plan ({gates})"
            )
        _values(label, r)

    def _links(self, label: str, r: Mapping[str, Any]) -> None:
        prev = r["previous_receipt_hash"]
        if self.previous is None and prev is not None:
            raise ReceiptInvalidError(
                f"{label}: previous_receipt_hash is {_short(prev)}, expected null (the first "
                "receipt of the chain)"
            )
        if self.previous is not None and prev != self.previous[1]:
            raise ReceiptInvalidError(
                f"{label}: previous_receipt_hash does not match {self.previous[0]}"
            )
        gate = r["gate_id"]
        if gate in self.rejected:
            raise ReceiptInvalidError(
                f"{label}: {gate} was already rejected earlier in the chain (a rejection is final)"
            )
        if r["decision"] == "rejected":
            self.rejected.add(gate)


def _label(i: int, entry: Any) -> str:
    """``receipt 3 (gate-B approved)`` when the entry says so, else ``receipt 3``."""
    r = entry.get("receipt") if isinstance(entry, Mapping) else None
    if isinstance(r, Mapping):
        gate, decision = r.get("gate_id"), r.get("decision")
        if isinstance(gate, str) and isinstance(decision, str):
            return f"receipt {i} ({_clip(gate)} {_clip(decision)})"
    return f"receipt {i}"


def _entry_shape(label: str, entry: Any) -> Mapping[str, Any]:
    if not isinstance(entry, Mapping) or set(entry) != _ENTRY_FIELDS:
        raise ReceiptInvalidError(f"{label}: expected an object with exactly receipt, signature")
    receipt = entry["receipt"]
    if not isinstance(receipt, Mapping) or set(receipt) != set(RECEIPT_FIELDS):
        found = sorted(receipt) if isinstance(receipt, Mapping) else type(receipt).__name__
        raise ReceiptInvalidError(
            f"{label}: receipt must have exactly the fields {list(RECEIPT_FIELDS)}, found {found}"
        )
    return receipt


def _holds(
    label: str, domain: bytes, signed: Mapping[str, Any], signature: Any, keys: BundleKeys
) -> None:
    """``signature`` is as the signer writes it and holds over ``domain || canonical(signed)``."""
    if not isinstance(signature, Mapping) or set(signature) != _SIGNATURE_FIELDS:
        raise ReceiptInvalidError(
            f"{label}: signature must be an object with exactly {sorted(_SIGNATURE_FIELDS)}"
        )
    pid, sig_b64 = signature["pubkey_id"], signature["signature"]
    if signature["algo"] != "Ed25519" or not isinstance(pid, str) or not isinstance(sig_b64, str):
        raise ReceiptInvalidError(f"{label}: signature: expected algo Ed25519 and string fields")
    try:
        sig = base64.b64decode(sig_b64, validate=True)
    except (binascii.Error, ValueError) as e:
        raise ReceiptInvalidError(f"{label}: signature.signature is not base64") from e
    if len(sig) != 64 or base64.b64encode(sig).decode("ascii") != sig_b64:
        raise ReceiptInvalidError(
            f"{label}: signature.signature: expected the standard base64 of 64 bytes"
        )
    try:
        keys.verify_key(pid).verify(domain + canonical_bytes(signed), sig)
    except UnknownKeyError as e:
        raise ReceiptInvalidError(f"{label}: {e.message}") from e
    except ContractError as e:
        raise ReceiptInvalidError(f"{label}: cannot be canonicalized: {e.message}") from e
    except NaclBadSignature as e:
        raise ReceiptInvalidError(
            f"{label}: the signature by key {pid!r} does not hold over it"
        ) from e


def _values(label: str, r: Mapping[str, Any]) -> None:
    """Each value as the service writes it (a signature by the key over other values is still
    not a receipt the service made)."""
    decision, token = r["decision"], r["token_id"]
    problems = [
        ("decision", decision in {"approved", "rejected"}),
        ("user_id", isinstance(r["user_id"], str) and 1 <= len(r["user_id"]) <= 128),
        ("choice_hash", isinstance(r["choice_hash"], str) and bool(_HEX64.match(r["choice_hash"]))),
        ("decided_at", _is_timestamp(r["decided_at"])),
        (
            "token_id",
            (isinstance(token, str) and bool(_HEX12.match(token)))
            if decision == "approved"
            else token is None,
        ),
    ]
    for name, ok in problems:
        if not ok:
            raise ReceiptInvalidError(
                f"{label}: {name} {_short(r[name])} is not as the service writes it"
            )


def _is_timestamp(value: Any) -> bool:
    if not isinstance(value, str) or not value.endswith("Z"):
        return False
    try:
        return format_utc(datetime.fromisoformat(value)) == value
    except ValueError:
        return False


def _clip(text: str) -> str:
    """A gate or decision as written when it is one, else a short repr (labels stay one line)."""
    if _GATE.match(text) or text in {"approved", "rejected"}:
        return text
    return repr(text[:24])


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
