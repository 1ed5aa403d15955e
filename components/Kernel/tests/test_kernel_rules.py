"""Gate rules (``kernel.rules``): each test kind on its own, the language is total (any JSON value
gets an answer), references are unknown, and a policy's rules are part of its signed version."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from countersign.kernel import DEFAULT_RULES, ArgTest, GateRule, Policy, rule_hits

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda kids: (
        st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=4), kids, max_size=3)
    ),
    max_leaves=8,
)


def _rule(**kw: Any) -> GateRule:
    return GateRule.model_validate(
        {"id": "r", "op": "*.send", "then": "gate", "because": "b", **kw}
    )


@pytest.mark.parametrize(
    ("test", "value", "holds"),
    [
        ({"gt": 100}, 150, True),
        ({"gt": 100}, 100, False),
        ({"gt": 100}, "100.01", True),
        ({"gt": 100}, {"amount": "120.00", "currency": "EUR"}, True),
        ({"gt": 100}, {"amount": "80", "currency": "EUR"}, False),
        ({"gt": 100}, "a lot", False),
        ({"gt": 100}, True, False),
        ({"ge": 100}, 100, True),
        ({"lt": 10}, 9.5, True),
        ({"le": 10}, 11, False),
        ({"eq": "bob@example.com"}, "bob@example.com", True),
        ({"ne": "bob@example.com"}, "eve@example.com", True),
        ({"in": ["a", "b"]}, "a", True),
        ({"in": []}, "a", False),
        ({"not_in": ["a", "b"]}, "c", True),
        ({"not_in": []}, "c", True),
        ({"matches": "*@example.com"}, "bob@example.com", True),
        ({"matches": "*@example.com"}, "bob@evil.com", False),
        ({"not_matches": "*@example.com"}, "bob@evil.com", True),
        ({"not_matches": "*@example.com"}, 7, True),
    ],
)
def test_each_kind_of_test(test: dict[str, Any], value: Any, holds: bool) -> None:
    assert ArgTest.model_validate(test).holds(value) is holds


@pytest.mark.parametrize("bad", [{}, {"gt": 1, "lt": 5}, {"gt": "many"}, {"like": "x"}])
def test_a_test_sets_exactly_one_known_field(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ArgTest.model_validate(bad)


@pytest.mark.parametrize(
    "bad",
    [
        {"id": "Bad Id", "op": "*", "then": "gate", "because": "b"},
        {"id": "r", "op": "*", "then": "maybe", "because": "b"},
        {"id": "r", "op": "*", "then": "gate", "because": ""},
        {"id": "r", "op": "a b", "then": "gate", "because": "b"},
        {"id": "r", "op": "*", "then": "gate", "because": "b", "extra": 1},
    ],
)
def test_a_broken_rule_is_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        GateRule.model_validate(bad)


@given(value=JSON)
def test_the_language_is_total(value: Any) -> None:
    for test in ({"gt": 1}, {"eq": 1}, {"ne": "x"}, {"in": [1]}, {"not_in": [1]}, {"matches": "*"}):
        assert isinstance(ArgTest.model_validate(test).holds(value), bool)
    hits = rule_hits(DEFAULT_RULES, "shop.sandbox.purchase", {"max_total": value})
    assert {h.rule for h in hits} >= {"purchase"}


def test_the_op_glob_and_every_test_must_hold() -> None:
    r = _rule(where={"to": {"not_matches": "*@example.com"}, "subject": {"eq": "x"}})
    assert r.matches("gmail.send", {"to": "eve@evil.com", "subject": "x"}) is True
    assert r.matches("gmail.send", {"to": "eve@evil.com", "subject": "y"}) is False
    assert r.matches("gmail.list", {"to": "eve@evil.com", "subject": "x"}) is False


def test_a_reference_is_unknown_until_the_write_runs() -> None:
    r = _rule(where={"to": {"not_matches": "*@example.com"}})
    assert r.matches("smtp.send", {"to": {"$ref": "steps.2.output.to"}}) is None
    (hit,) = rule_hits([r], "smtp.send", {"to": {"$ref": "steps.2.output.to"}})
    assert hit.sure is False


def test_rules_are_in_the_signed_policy_and_round_trip() -> None:
    p = Policy()
    assert [r["id"] for r in p.to_json()["rules"]] == [r.id for r in DEFAULT_RULES]
    assert Policy.model_validate(p.to_json()).version == p.version
    tighter = Policy(rules=(*DEFAULT_RULES, _rule(id="extra")))
    assert tighter.version != p.version
    written = tighter.to_json()["rules"][-1]
    assert written == {"id": "extra", "op": "*.send", "where": {}, "then": "gate", "because": "b"}
    with_in = Policy(rules=(_rule(where={"to": {"in": ["a"]}}),)).to_json()["rules"][0]
    assert with_in["where"] == {"to": {"in": ["a"]}}, "written by its name, only what it sets"
