"""Identifiers: ULIDs, made either from a clock and randomness passed in, or derived from content.

Deriving an id from content keeps the Planner pure (ARCHITECTURE.md §3.1): the 48-bit time part
comes from a timestamp in the inputs and the 80-bit random part from a hash of the inputs.
"""

from __future__ import annotations

import hashlib
from datetime import datetime

from ulid import ULID

from .errors import ContractError

__all__ = ["derived_ulid", "parse_ulid"]


def derived_ulid(at: datetime, *material: bytes) -> str:
    """A ULID whose time is ``at`` and whose randomness is sha256 of ``material``.

    Same inputs give the same id; any change of ``material`` changes the last 80 bits.
    """
    if at.tzinfo is None:
        raise ContractError("derived_ulid needs a timezone-aware datetime")
    ms = int(at.timestamp() * 1000)
    if not 0 <= ms < 2**48:
        raise ContractError(f"timestamp {at.isoformat()} is outside the ULID range")
    digest = hashlib.sha256(b"\x00".join(material)).digest()
    return str(ULID.from_bytes(ms.to_bytes(6, "big") + digest[:10]))


def parse_ulid(value: str) -> str:
    """Validate a ULID string and return it in canonical upper-case form."""
    try:
        return str(ULID.from_str(value))
    except (ValueError, TypeError) as e:
        raise ContractError(f"{value!r} is not a ULID (26 Crockford base32 characters)") from e
