"""Canonical JSON (RFC 8785, via the ``rfc8785`` package) and content hashes.

Invariant: two JSON values that are equal as data give the same bytes, whatever their key order
or whitespace, and so the same ``sha256``. Integers outside the I-JSON range (|n| > 2^53 - 1) and
non-finite floats are refused rather than silently rounded (PEERS.md: JCS number traps).

Fast path (Kernel LLD §1): for values without floats and with ASCII object keys, RFC 8785's output
is byte-for-byte what ``pydantic_core.to_json`` gives for a copy of the value whose objects have
their keys sorted (compact, the same escapes, the same integer form, and UTF-16 key order equals
code-point order for ASCII). Everything else goes through the ``rfc8785`` package. A differential
property test holds the two paths equal. (Sorting in the copy and encoding in Rust costs about
two thirds of the C ``json`` encoder with ``sort_keys``, which builds a list of small strings.)
"""

from __future__ import annotations

import hashlib
from typing import Any

import pydantic_core
import rfc8785

from .errors import ContractError

__all__ = ["canonical_bytes", "canonical_bytes_reference", "content_hash", "sha256_hex"]

_MAX_SAFE = 2**53 - 1


class _NotFastError(Exception):
    """The value holds something the fast path does not encode as RFC 8785 does."""


def _sorted_copy(value: Any) -> Any:
    """A copy of ``value`` with fresh dicts (keys sorted) and lists; raises ``_NotFastError`` on a
    float, a non-ASCII or non-string key, an integer beyond 2^53 - 1 or a non-JSON type.

    Exact types only (a ``str`` or ``dict`` subclass, a tuple go to the reference). One call per
    object or array (``_copy_dict``, ``_copy_list``).
    """
    t = type(value)
    if t is dict:
        return _copy_dict(value)
    if t is list:
        return _copy_list(value)
    if t is int:
        if not -_MAX_SAFE <= value <= _MAX_SAFE:
            raise _NotFastError
        return value
    if t is str or t is bool or value is None:
        return value
    raise _NotFastError


# The leaf check is written out in both loops below rather than called: a call per leaf costs
# about half as much again as the whole copy (Kernel LLD §1, the fast path).
def _copy_dict(value: dict[Any, Any]) -> dict[str, Any]:
    for k in value:
        if type(k) is not str or not k.isascii():
            raise _NotFastError
    out: dict[str, Any] = {}
    for k in sorted(value):
        x = value[k]
        tx = type(x)
        if tx is dict:
            x = _copy_dict(x)
        elif tx is list:
            x = _copy_list(x)
        elif tx is int:
            if not -_MAX_SAFE <= x <= _MAX_SAFE:
                raise _NotFastError
        elif not (tx is str or tx is bool or x is None):
            raise _NotFastError
        out[k] = x
    return out


def _copy_list(value: list[Any]) -> list[Any]:
    items: list[Any] = []
    for x in value:
        tx = type(x)
        if tx is dict:
            items.append(_copy_dict(x))
            continue
        if tx is list:
            items.append(_copy_list(x))
            continue
        if tx is int:
            if not -_MAX_SAFE <= x <= _MAX_SAFE:
                raise _NotFastError
        elif not (tx is str or tx is bool or x is None):
            raise _NotFastError
        items.append(x)
    return items


def canonical_bytes(value: Any) -> bytes:
    """Serialize a JSON value (dicts, lists, str, int, float, bool, None) to RFC 8785 bytes.

    Raises:
        ContractError: the value holds something JSON cannot carry exactly (a huge integer,
            NaN/Infinity, a non-string key, a non-JSON type).
    """
    try:
        copy = _sorted_copy(value)
    except _NotFastError:
        return canonical_bytes_reference(value)
    try:
        return pydantic_core.to_json(copy)
    except pydantic_core.PydanticSerializationError:
        # a lone surrogate (not UTF-8): the reference refuses it with its own message
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
