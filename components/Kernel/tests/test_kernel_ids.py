"""parse_ulid's spelling check gives the same verdict and result as python-ulid's decoder."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from ulid import ULID

from countersign.kernel import ContractError
from countersign.kernel.ids import parse_ulid

# Crockford's alphabet in both cases, the letters it leaves out (I L O U), look-alikes outside
# ASCII whose upper case is ASCII ('ſ' -> 'S', 'ı' -> 'I'), and a newline (a ``$`` trap).
_CHARS = "0123456789ABCDEFGHJKMNPQRSTVWXYZabcdefghjkmnpqrstvwxyz" + "ILOUilou" + "ſı\n -"


def _reference(value: str) -> str | None:
    try:
        return str(ULID.from_str(value))
    except (ValueError, TypeError):
        return None


def _ours(value: str) -> str | None:
    try:
        return parse_ulid(value)
    except ContractError:
        return None


@st.composite
def _near_ulids(draw: st.DrawFn) -> str:
    """A real ULID's text, in mixed case, with up to two characters replaced, dropped or added."""
    text = str(ULID.from_bytes(draw(st.binary(min_size=16, max_size=16))))
    chars = [c.lower() if draw(st.booleans()) else c for c in text]
    for _ in range(draw(st.integers(0, 2))):
        at = draw(st.integers(0, len(chars) - 1))
        what = draw(st.sampled_from(["replace", "drop", "add"]))
        if what == "drop":
            del chars[at]
        else:
            chars[at : at + (what == "replace")] = [draw(st.sampled_from(_CHARS))]
    return "".join(chars)


@settings(max_examples=1500, deadline=None)
@given(_near_ulids() | st.text(alphabet=_CHARS, min_size=24, max_size=28))
@example("01JDQ3Z0000000000000000000")
@example("01jdq3z0000000000000000000")
@example("7ZZZZZZZZZZZZZZZZZZZZZZZZZ")
@example("8ZZZZZZZZZZZZZZZZZZZZZZZZZ")
@example("01JDQ3Z000000000000000000\n")
@example("01JDQ3Z00000000000000000ſ0")
def test_parse_ulid_matches_python_ulid(value: str) -> None:
    assert _ours(value) == _reference(value)


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=16, max_size=16))
def test_every_ulid_parses_to_itself(raw: bytes) -> None:
    text = str(ULID.from_bytes(raw))
    assert parse_ulid(text) == text
    assert parse_ulid(text.lower()) == text


def test_refusal_names_the_value() -> None:
    with pytest.raises(ContractError, match="'01JDQ3Z000000000000000000I' is not a ULID"):
        parse_ulid("01JDQ3Z000000000000000000I")
