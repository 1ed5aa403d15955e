"""Identifiers: ULIDs, made either from a clock and randomness passed in, or derived from content.

Deriving an id from content keeps the Planner pure (GLOBAL_SPEC §13 inv. 1): the 48-bit time part
comes from a timestamp in the inputs and the 80-bit random part from a hash of the inputs.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime

from ulid import ULID

from .errors import ContractError

__all__ = ["ascii_digits", "derived_ulid", "parse_ulid"]

#: What ``ULID.from_str`` accepts: 26 Crockford base32 characters of either case (no I, L, O, U),
#: the first at most 7 (128 bits, no overflow). Decoding and re-encoding such a string gives its
#: upper-case form, so checking the spelling is enough; ``test_kernel_ids.py`` holds this equal
#: to ``str(ULID.from_str(value))`` on generated strings.
_ULID = re.compile(r"[0-7][0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{25}")


def ascii_digits(text: str) -> bool:
    """``text`` is one or more ASCII digits ``0``–``9`` — what ``int()`` may then be given.

    ``str.isdigit`` is true for ``²``, ``٣``, ``０`` and every other Unicode digit: ``int("²")``
    raises, ``int("٣")`` is 3. A number a person or a peer sends (an event id, a step index, a
    port) is read only after this check, so it has one spelling and never crashes the reader.
    """
    return text.isascii() and text.isdigit()


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
    """Validate a ULID string and return it in canonical upper-case form.

    Same verdict and result as ``str(ULID.from_str(value))`` (Kernel LLD §6), at a tenth of
    the cost: a plan holds two ULIDs and its envelope one, and each is parsed on every verify.
    """
    if type(value) is str and _ULID.fullmatch(value) is not None:
        return value.upper()
    try:
        return str(ULID.from_str(value))
    except (ValueError, TypeError) as e:
        raise ContractError(f"{value!r} is not a ULID (26 Crockford base32 characters)") from e
