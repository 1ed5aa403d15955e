"""The person's facts at the write (``steps.policy``, issue 26 §1): ``write_facts`` reads the live
source only when a rule names a set other than ``self`` (the default rules: never — no read on
the gate path) and always knows ``self``; ``policy_refusal`` with the facts as read at the write
passes a mail to a contact the plan's gate did not gate for, and refuses it once the contact is
gone (the ground moved) or when the contacts cannot be read (unknown: the rule must be on the
gate)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from countersign.kernel import DEFAULT_RULES, GateRule, Plan, Policy
from countersign.kernel.rules import MAIL_OUTSIDE_CONTACTS, RuleFacts
from countersign.planner import make_plan
from countersign.planner.facts import contact_evidence
from countersign.planner.testing import make_intent
from countersign.registry import Registry
from countersign.steps import policy_refusal
from countersign.steps.policy import FactsSource, contacts_source, write_facts

ME, BOB = "alice@example.com", "bob@example.com"
POLICY = Policy(rules=(*DEFAULT_RULES, MAIL_OUTSIDE_CONTACTS))


def _book(book: dict[str, list[tuple[str, str]]], reads: list[str]) -> FactsSource:
    def read(user_id: str) -> Iterable[tuple[str, str]]:
        reads.append(user_id)
        return book.get(user_id, [])

    return contacts_source(read)


def test_the_source_is_read_only_when_a_rule_needs_it() -> None:
    reads: list[str] = []
    source = _book({ME: [("Bob", "Bob@Example.com")]}, reads)
    assert write_facts(Policy(), ME, source).sets == {"self": {ME}}
    self_only = GateRule.model_validate(
        {
            "id": "own",
            "op": "*.x",
            "where": {"u": {"in_set": "self"}},
            "then": "gate",
            "because": "b",
        }
    )
    assert write_facts(Policy(rules=(self_only,)), ME, source).sets == {"self": {ME}}
    assert reads == []
    facts = write_facts(POLICY, ME, source)
    assert facts.sets == {"self": {ME}, "contacts": {BOB}}
    assert reads == [ME]
    assert write_facts(POLICY, ME, None).sets == {"self": {ME}}
    # a source that says who ``self`` is keeps its own
    own = RuleFacts.of({"self": [ME, "alice@work.example"], "contacts": []})
    assert write_facts(POLICY, ME, lambda _u: own) is own


def _meeting(registry: Registry) -> Plan:
    base = make_intent("schedule_meeting")
    intent = make_intent("schedule_meeting", user_id=ME, entities=dict(base.entities))
    plan = make_plan(intent, contact_evidence([BOB]), registry, POLICY)
    assert isinstance(plan, Plan)
    return plan


def test_the_write_check_reads_the_contacts_as_they_are_now(registry: Registry) -> None:
    plan = _meeting(registry)
    (gate,) = [s for s in plan.graph if s.gate_id]
    because: Any = gate.args["because"]
    assert "mail-outside-contacts" not in {b["rule"] for b in because}
    to_bob = next(s for s in plan.graph if s.call == "send" and s.args["to"] == BOB)
    reads: list[str] = []
    book = {ME: [("Bob", BOB)]}
    source = _book(book, reads)
    assert (
        policy_refusal(plan, to_bob, to_bob.args, POLICY, facts=write_facts(POLICY, ME, source))
        is None
    )
    book[ME] = []  # Bob removed after the approval
    why = policy_refusal(plan, to_bob, to_bob.args, POLICY, facts=write_facts(POLICY, ME, source))
    assert why is not None and "mail-outside-contacts" in why and f"step {to_bob.step}" in why
    # contacts that cannot be read: unknown, and the plan's gate does not name the rule
    assert policy_refusal(plan, to_bob, to_bob.args, POLICY, facts=write_facts(POLICY, ME, None))
    # the mail to oneself never needed the contacts
    to_me = next(s for s in plan.graph if s.call == "send" and s.args["to"] == ME)
    assert (
        policy_refusal(plan, to_me, to_me.args, POLICY, facts=write_facts(POLICY, ME, source))
        is None
    )
