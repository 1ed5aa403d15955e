"""The fast canonicalization path equals the rfc8785 reference on every JSON value."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from countersign.kernel import ContractError, canonical_bytes
from countersign.kernel.canonical import canonical_bytes_reference

_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)
_keys = st.one_of(_text, st.text(alphabet=st.characters(max_codepoint=127), max_size=8))
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _text,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(_keys, children, max_size=5),
    max_leaves=40,
)


@settings(max_examples=800, deadline=None)
@given(json_values)
def test_fast_path_matches_reference(value: Any) -> None:
    assert canonical_bytes(value) == canonical_bytes_reference(value)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_key_order_and_whitespace_do_not_matter(value: Any) -> None:
    again = json.loads(json.dumps(value, indent=3, sort_keys=False))
    assert canonical_bytes(again) == canonical_bytes(value)


def test_known_vectors() -> None:
    assert canonical_bytes({"b": 1, "a": [True, None, "é\n\u001f"]}) == (
        '{"a":[true,null,"é\\n\\u001f"],"b":1}'.encode()
    )
    # UTF-16 order: U+10000 (surrogates D800…) sorts before U+E000 in JCS, after it by code point
    assert canonical_bytes({"\ue000": 1, "\U00010000": 2}) == '{"\U00010000":2,"\ue000":1}'.encode()
    assert canonical_bytes({"x": 1e21}) == b'{"x":1e+21}'


@pytest.mark.parametrize("bad", [2**53, -(2**53), float("nan"), float("inf"), {1: 2}, {"a": b"x"}])
def test_unrepresentable_values_are_refused(bad: Any) -> None:
    with pytest.raises(ContractError):
        canonical_bytes(bad if isinstance(bad, dict) else {"v": bad})
