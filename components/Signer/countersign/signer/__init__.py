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
from .keyring import KeyInfo, KeyRing, KeyStatus
from .proven import ProvenSignatures

__all__ = [
    "DOMAIN",
    "PROVEN",
    "KeyInfo",
    "KeyLookup",
    "KeyRing",
    "KeyStatus",
    "ProvenSignatures",
    "VerifiedPlan",
    "fresh_seed",
    "open_keyring",
    "plan_hash",
    "sign_plan",
    "signing_message",
    "verify_signed_plan",
]
