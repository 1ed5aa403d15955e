"""The fast canonicalization path equals the rfc8785 reference on every JSON value."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from countersign.kernel import ContractError, canonical_bytes
from countersign.kernel.canonical import _NotFastError, _sorted_copy, canonical_bytes_reference

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


def _fast_ok_spec(value: Any) -> bool:
    """The fast path's condition, written as its definition (the recursive original)."""
    t = type(value)
    if t is str or t is bool or value is None:
        return True
    if t is int:
        return bool(-(2**53) < value < 2**53)
    if t is dict:
        return all(type(k) is str and k.isascii() and _fast_ok_spec(v) for k, v in value.items())
    if t is list:
        return all(_fast_ok_spec(v) for v in value)
    return False


class _Str(str):
    pass


_odd_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**54), 2**54)
    | st.floats(allow_nan=False)
    | _text
    | st.builds(_Str, _text)
    | st.binary(max_size=2),
    lambda children: (
        st.lists(children, max_size=4)
        | st.lists(children, max_size=3).map(tuple)
        | st.dictionaries(_keys | st.integers(0, 3), children, max_size=4)
    ),
    max_leaves=30,
)


def _containers(value: Any) -> list[Any]:
    found = []
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict | list | tuple):
            found.append(v)
            stack.extend(v.values() if isinstance(v, dict) else v)
    return found


@settings(max_examples=800, deadline=None)
@given(_odd_values)
def test_fast_path_condition_matches_its_definition(value: Any) -> None:
    """The fast path takes exactly the values of its definition; its sorted copy is the value,
    made of fresh containers only, and the reference writes the copy as it writes the value."""
    try:
        copy = _sorted_copy(value)
    except _NotFastError:
        assert not _fast_ok_spec(value)
        return
    assert _fast_ok_spec(value)
    assert copy == value
    assert not {id(c) for c in _containers(value)} & {id(c) for c in _containers(copy)}
    assert canonical_bytes_reference(copy) == canonical_bytes_reference(value)
    assert canonical_bytes(value) == canonical_bytes_reference(value)


def test_a_lone_surrogate_is_refused_on_either_path() -> None:
    with pytest.raises(ContractError):
        canonical_bytes({"k": "\ud800"})
    with pytest.raises(ContractError):
        canonical_bytes({"k": "\ud800", "f": 1.5})


def test_every_code_point_is_written_as_the_reference_writes_it() -> None:
    """Strings are where the fast path's encoder could differ: all of Unicode but the surrogates,
    in string values under ASCII keys (the fast path's domain)."""
    for start in range(0, 0x110000, 4096):
        chars = "".join(
            chr(c) for c in range(start, min(start + 4096, 0x110000)) if not 0xD800 <= c < 0xE000
        )
        value = {"k": chars, "list": [chars[:7], chars[-7:]]}
        assert canonical_bytes(value) == canonical_bytes_reference(value), hex(start)
