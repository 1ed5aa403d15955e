"""Signer: canonical plan bytes, plan hash, Ed25519 signatures, and the key ring."""

from .adapters import fresh_seed, open_keyring
from .core import (
    DOMAIN,
    KeyLookup,
    VerifiedPlan,
    plan_hash,
    sign_plan,
    signing_message,
    verify_signed_plan,
)
from .keyring import KeyInfo, KeyRing, KeyStatus

__all__ = [
    "DOMAIN",
    "KeyInfo",
    "KeyLookup",
    "KeyRing",
    "KeyStatus",
    "VerifiedPlan",
    "fresh_seed",
    "open_keyring",
    "plan_hash",
    "sign_plan",
    "signing_message",
    "verify_signed_plan",
]
