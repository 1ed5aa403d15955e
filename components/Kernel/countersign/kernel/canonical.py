"""Canonical JSON (RFC 8785, via the ``rfc8785`` package) and content hashes.

Invariant: two JSON values that are equal as data give the same bytes, whatever their key order
or whitespace, and so the same ``sha256``. Integers outside the I-JSON range (|n| > 2^53 - 1) and
non-finite floats are refused rather than silently rounded (PEERS.md: JCS number traps).
"""

from __future__ import annotations

import hashlib
from typing import Any

import rfc8785

from .errors import ContractError

__all__ = ["canonical_bytes", "content_hash", "sha256_hex"]


def canonical_bytes(value: Any) -> bytes:
    """Serialize a JSON value (dicts, lists, str, int, float, bool, None) to RFC 8785 bytes.

    Raises:
        ContractError: the value holds something JSON cannot carry exactly (a huge integer,
            NaN/Infinity, a non-string key, a non-JSON type).
    """
    try:
        return rfc8785.dumps(value)
    except rfc8785.CanonicalizationError as e:
        raise ContractError(f"value cannot be canonicalized as RFC 8785 JSON: {e}") from e
    except (TypeError, ValueError) as e:
        raise ContractError(f"value is not JSON: {e}") from e


def sha256_hex(data: bytes) -> str:
    """Lower-case hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def content_hash(value: Any) -> str:
    """``sha256`` hex of the canonical bytes of a JSON value."""
    return sha256_hex(canonical_bytes(value))
