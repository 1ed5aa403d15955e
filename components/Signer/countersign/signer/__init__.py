"""Signer: canonical plan bytes, plan hash, Ed25519 signatures, and the key ring."""

from .adapters import fresh_seed, open_keyring
from .core import (
    DOMAIN,
    PROVEN,
    KeyLookup,
    VerifiedPlan,
    plan_hash,
    sign_plan,
    signing_message,
    verify_signed_plan,
)
from .errors import ReceiptBundleError, ReceiptInvalidError
from .keyring import KeyInfo, KeyRing, KeyStatus
from .proven import ProvenSignatures
from .receipts import (
    HEAD_DOMAIN,
    RECEIPT_DOMAIN,
    RECEIPT_FIELDS,
    BundleKeys,
    BundleReport,
    ReceiptFields,
    ReceiptKeySigner,
    SignedReceipt,
    load_bundle,
    make_bundle,
    make_receipt,
    receipt_hash,
    sign_receipt,
    verify_bundle,
)

__all__ = [
    "DOMAIN",
    "HEAD_DOMAIN",
    "PROVEN",
    "RECEIPT_DOMAIN",
    "RECEIPT_FIELDS",
    "BundleKeys",
    "BundleReport",
    "KeyInfo",
    "KeyLookup",
    "KeyRing",
    "KeyStatus",
    "ProvenSignatures",
    "ReceiptBundleError",
    "ReceiptFields",
    "ReceiptInvalidError",
    "ReceiptKeySigner",
    "SignedReceipt",
    "VerifiedPlan",
    "fresh_seed",
    "load_bundle",
    "make_bundle",
    "make_receipt",
    "open_keyring",
    "plan_hash",
    "receipt_hash",
    "sign_plan",
    "sign_receipt",
    "signing_message",
    "verify_bundle",
    "verify_signed_plan",
]
