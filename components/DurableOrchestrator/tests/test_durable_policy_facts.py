"""The durable write check reads the person's facts at the write (issue 26 §1): the activities are
built with a ``FactsSource`` (the ``worker`` command's reads ContextRAG's contacts); a visa
notice to a contact, planned without the "outside my contacts" reason, passes while the contact
stands and is refused — non-retryable ``policy_refused``, audited — once it is gone.

Real Postgres (the audit); the check is called as ``write_step`` calls it, before anything is
held or sent."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from sqlalchemy import text
from temporalio.exceptions import ApplicationError

from countersign.durable import DurableActivities
from countersign.kernel import DEFAULT_RULES, Plan, Policy
from countersign.kernel.rules import MAIL_OUTSIDE_CONTACTS
from countersign.planner import make_plan
from countersign.planner.facts import contact_evidence
from countersign.planner.testing import make_intent
from countersign.registry import Registry
from countersign.signer import KeyRing
from countersign.steps.policy import contacts_source
from countersign.storage import Database

ME, DAVE = "alice@example.com", "dave@example.org"
POLICY = Policy(rules=(*DEFAULT_RULES, MAIL_OUTSIDE_CONTACTS))


def test_a_durable_notice_to_a_removed_contact_is_refused(
    db: Database, registry: Registry, keyring: KeyRing
) -> None:
    base = make_intent("watch_visa_slots")
    intent = make_intent(
        "watch_visa_slots", user_id=ME, entities={**base.entities, "notify_to": DAVE}
    )
    plan = make_plan(intent, contact_evidence([DAVE]), registry, POLICY)
    assert isinstance(plan, Plan)
    notice = next(s for s in plan.graph if s.call == "send")
    book: dict[str, list[tuple[str, str]]] = {ME: [("Dave", DAVE)]}

    def contacts(user_id: str) -> Iterable[tuple[str, str]]:
        return list(book.get(user_id, []))

    acts = DurableActivities(
        db,
        keys=keyring,
        registry=registry,
        settings={},
        policy=POLICY,
        facts=contacts_source(contacts),
    )
    args = {**notice.args, "details": {"slot": "2027-03-02T09:00:00Z"}}
    acts._policy_allows(plan, notice, args, ME)  # the contact stands: it may run
    book[ME] = []
    with pytest.raises(ApplicationError) as refused:
        acts._policy_allows(plan, notice, args, ME)
    assert refused.value.type == "policy_refused" and refused.value.non_retryable
    assert "mail-outside-contacts" in str(refused.value)
    with db.tx() as c:
        n = c.execute(
            text("SELECT count(*) FROM audit_log WHERE plan_id = :p AND reason = 'policy_refused'"),
            {"p": plan.plan_id},
        ).scalar_one()
    assert n == 1
