"""Canonical JSON (RFC 8785, via the ``rfc8785`` package) and content hashes.

Invariant: two JSON values that are equal as data give the same bytes, whatever their key order
or whitespace, and so the same ``sha256``. Integers outside the I-JSON range (|n| > 2^53 - 1) and
non-finite floats are refused rather than silently rounded (PEERS.md: JCS number traps).

Fast path (Kernel LLD §1): for values without floats and with ASCII object keys, RFC 8785's output
is byte-for-byte what the C-accelerated ``json`` encoder gives with sorted keys, compact
separators and ``ensure_ascii=False`` (same escapes, same integer form, and UTF-16 key order
equals code-point order for ASCII). Everything else goes through the ``rfc8785`` package. A
differential property test holds the two paths equal.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import rfc8785

from .errors import ContractError

__all__ = ["canonical_bytes", "canonical_bytes_reference", "content_hash", "sha256_hex"]

_MAX_SAFE = 2**53 - 1
_ENCODER = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), sort_keys=True, allow_nan=False, check_circular=False
)


def _fast_ok(value: Any) -> bool:
    """True when the fast path gives RFC 8785 bytes for ``value`` (no floats, ASCII keys).

    Exact types only (a ``str`` or ``dict`` subclass goes to the reference). One loop over an
    explicit stack rather than a recursive call per value: this walk is a third of the cost of
    a canonicalization, and a plan is canonicalized at each of plan, sign and verify.
    """
    stack = [value]
    pop, push = stack.pop, stack.append
    while stack:
        v = pop()
        t = type(v)
        if t is dict:
            for k, x in v.items():
                if type(k) is not str or not k.isascii():
                    return False
                tx = type(x)
                if tx is str or tx is bool or x is None:
                    continue
                if tx is int:
                    if -_MAX_SAFE <= x <= _MAX_SAFE:
                        continue
                    return False
                if tx is dict or tx is list:
                    push(x)
                    continue
                return False
        elif t is list:
            for x in v:
                tx = type(x)
                if tx is str or tx is bool or x is None:
                    continue
                if tx is int:
                    if -_MAX_SAFE <= x <= _MAX_SAFE:
                        continue
                    return False
                if tx is dict or tx is list:
                    push(x)
                    continue
                return False
        elif t is int:
            if not -_MAX_SAFE <= v <= _MAX_SAFE:
                return False
        elif not (t is str or t is bool or v is None):
            return False
    return True


def canonical_bytes(value: Any) -> bytes:
    """Serialize a JSON value (dicts, lists, str, int, float, bool, None) to RFC 8785 bytes.

    Raises:
        ContractError: the value holds something JSON cannot carry exactly (a huge integer,
            NaN/Infinity, a non-string key, a non-JSON type).
    """
    if _fast_ok(value):
        try:
            return _ENCODER.encode(value).encode("utf-8")
        except UnicodeEncodeError:
            pass  # a lone surrogate: let the reference path decide
    return canonical_bytes_reference(value)


def canonical_bytes_reference(value: Any) -> bytes:
    """RFC 8785 bytes from the ``rfc8785`` package alone (the reference for the fast path)."""
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
