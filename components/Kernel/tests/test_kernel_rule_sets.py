"""Set tests in gate rules (``kernel.rules``, issue 26 §1): an argument against a named set of
the person's facts (``in_set`` / ``not_in_set``). A list fails ``not_in_set`` as soon as ANY
element is outside; addresses compare case-insensitively; a set the caller did not give is
unknown (a gate rule applies, a deny waits); every JSON value gets an answer."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from countersign.kernel import DEFAULT_RULES, ArgTest, GateRule, Policy, rule_hits
from countersign.kernel.rules import (
    MAIL_OUTSIDE_CONTACTS,
    OTHERS_CALENDAR,
    RuleFacts,
    person_facts,
    set_names,
)

FACTS = RuleFacts.of(
    {"contacts": ["Bob@Example.com", "carol@example.com"], "self": ["alice@example.com"]}
)
REF = {"$ref": "gates.gate-A.choice.to"}
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda kids: (
        st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=4), kids, max_size=3)
    ),
    max_leaves=8,
)


def _rule(then: str = "gate", **where: Any) -> GateRule:
    return GateRule.model_validate(
        {"id": "outside", "op": "*.send", "then": then, "because": "b", "where": where}
    )


@pytest.mark.parametrize(
    ("test", "value", "expected"),
    [
        ({"in_set": "contacts"}, "bob@example.com", True),
        ({"in_set": "contacts"}, "  BOB@EXAMPLE.COM ", True),
        ({"in_set": "contacts"}, "dave@example.com", False),
        ({"in_set": "contacts"}, ["bob@example.com", "carol@example.com"], True),
        ({"in_set": "contacts"}, ["bob@example.com", "dave@example.com"], False),
        ({"in_set": "contacts"}, [], True),
        ({"in_set": "contacts"}, None, False),
        ({"in_set": "contacts"}, 7, False),
        ({"in_set": "contacts"}, {"email": "bob@example.com"}, False),
        ({"not_in_set": "contacts"}, "bob@example.com", False),
        ({"not_in_set": "contacts"}, "dave@example.com", True),
        # ANY element outside is enough
        ({"not_in_set": "contacts"}, ["bob@example.com", "dave@example.com"], True),
        ({"not_in_set": "contacts"}, ["Carol@example.com", "bob@example.com"], False),
        ({"not_in_set": "contacts"}, ["bob@example.com", 3], True),
        ({"not_in_set": "contacts"}, [], False),
        ({"not_in_set": "contacts"}, None, True),
        # the union of several sets
        ({"not_in_set": ["contacts", "self"]}, ["alice@example.com", "bob@example.com"], False),
        ({"not_in_set": "contacts"}, ["alice@example.com", "bob@example.com"], True),
        ({"in_set": ["self"]}, "ALICE@example.com", True),
        # references: unknown, unless a known element already decides
        ({"not_in_set": "contacts"}, REF, None),
        ({"not_in_set": "contacts"}, ["bob@example.com", REF], None),
        ({"not_in_set": "contacts"}, ["dave@example.com", REF], True),
        ({"in_set": "contacts"}, ["dave@example.com", REF], False),
        # a set the caller did not give: unknown
        ({"in_set": "vips"}, "bob@example.com", None),
        ({"not_in_set": ["contacts", "vips"]}, "dave@example.com", None),
    ],
)
def test_each_set_test(test: dict[str, Any], value: Any, expected: bool | None) -> None:
    assert ArgTest.model_validate(test).check(value, FACTS) is expected


@pytest.mark.parametrize(
    "test",
    [
        {"in_set": []},
        {"in_set": "Contacts"},
        {"not_in_set": ["contacts", "no spaces"]},
        {"in_set": [f"s{i}" for i in range(9)]},
        {"in_set": "contacts", "eq": "x"},
    ],
)
def test_a_set_test_is_refused_when_malformed(test: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ArgTest.model_validate(test)


def test_an_unknown_set_applies_a_gate_rule_and_a_deny_waits() -> None:
    args = {"to": "dave@example.com"}
    for facts in (None, RuleFacts.of({"self": ["alice@example.com"]})):
        (gate,) = rule_hits([_rule(to={"not_in_set": "contacts"})], "smtp.send", args, facts)
        assert (gate.then, gate.sure) == ("gate", False)
        (deny,) = rule_hits(
            [_rule("deny", to={"not_in_set": "contacts"})], "smtp.send", args, facts
        )
        assert (deny.then, deny.sure) == ("deny", False)
    # known: sure, and a contact does not hit at all
    (hit,) = rule_hits([_rule(to={"not_in_set": "contacts"})], "smtp.send", args, FACTS)
    assert hit.sure
    assert (
        rule_hits(
            [_rule(to={"not_in_set": "contacts"})], "smtp.send", {"to": "bob@example.com"}, FACTS
        )
        == []
    )


def test_person_facts_and_the_sets_a_policy_names() -> None:
    facts = person_facts("Alice@Example.com", ["Bob@example.com"])
    assert facts.sets == {"self": {"alice@example.com"}, "contacts": {"bob@example.com"}}
    assert "contacts" not in person_facts("alice@example.com").sets
    assert set_names(DEFAULT_RULES) == frozenset()
    rules = [_rule(to={"not_in_set": ["contacts", "self"]}), _rule(user={"in_set": "self"})]
    assert set_names(rules) == {"contacts", "self"}


def test_a_set_rule_is_signed_as_written_and_default_policies_keep_their_version() -> None:
    plain = Policy()
    assert "in_set" not in str(plain.to_json()) and "not_in_set" not in str(plain.to_json())
    ruled = Policy(rules=(*DEFAULT_RULES, _rule(to={"not_in_set": ["contacts", "self"]})))
    assert ruled.version != plain.version
    assert ruled.to_json()["rules"][-1]["where"] == {"to": {"not_in_set": ["contacts", "self"]}}
    assert Policy.model_validate(ruled.to_json()).version == ruled.version


@given(JSON)
def test_set_tests_are_total_and_exact_negations(value: Any) -> None:
    inside = ArgTest.model_validate({"in_set": "contacts"}).check(value, FACTS)
    outside = ArgTest.model_validate({"not_in_set": "contacts"}).check(value, FACTS)
    assert inside in (True, False, None)
    assert outside is (None if inside is None else not inside)
    # no facts given: every set test is unknown, whatever the value
    assert ArgTest.model_validate({"in_set": "contacts"}).check(value) is None


def test_the_rule_forms_over_facts() -> None:
    facts = person_facts("alice@example.com", ["bob@example.com"])
    mail, cal = [MAIL_OUTSIDE_CONTACTS], [OTHERS_CALENDAR]
    assert (
        rule_hits(mail, "gmail.send", {"to": ["alice@example.com", "bob@example.com"]}, facts) == []
    )
    (hit,) = rule_hits(mail, "gmail.send", {"to": ["bob@example.com", "eve@x.org"]}, facts)
    assert hit.sure and hit.because == "a recipient is not in your contacts"
    assert rule_hits(cal, "caldav.create_event", {"user": "Alice@example.com"}, facts) == []
    (hit,) = rule_hits(cal, "caldav.create_event", {"user": "bob@example.com"}, facts)
    assert hit.rule == "others-calendar" and hit.sure
