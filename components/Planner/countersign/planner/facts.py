"""The person's facts the policy's set tests read at planning (GLOBAL_SPEC §9, Planner SPEC).

From the plan's inputs only, so the plan stays a pure function of them: ``self`` is the plan's
user (their own address and calendar), ``contacts`` the e-mail addresses of the ``contact``
evidence (ContextRAG puts there the contacts the intent names). A recipient the evidence does not
name is outside the contacts here: a ``not_in_set: contacts`` gate rule then applies (one reason
too many at most); the executors read the live contacts again at the write.
"""

from __future__ import annotations

from collections.abc import Sequence

from countersign.kernel import Evidence, Intent
from countersign.kernel.rules import RuleFacts, person_facts

__all__ = ["contact_evidence", "plan_facts"]


def plan_facts(intent: Intent, evidence: Sequence[Evidence]) -> RuleFacts:
    """``self`` and ``contacts`` as the plan's inputs say."""
    mails = [
        e.value["email"]
        for e in evidence
        if e.type == "contact"
        and isinstance(e.value, dict)
        and isinstance(e.value.get("email"), str)
    ]
    return person_facts(intent.user_id, [str(m) for m in mails])


def contact_evidence(mails: Sequence[str]) -> list[Evidence]:
    """``contact`` evidence for these addresses, as ContextRAG gives it for contacts the intent
    names (tests and benches that plan with a person's contacts)."""
    return [
        Evidence(
            type="contact",
            key=f"contact {i}",
            value={"email": mail},
            confidence=0.8,
            source_ref=f"contact:{i}",
        )
        for i, mail in enumerate(mails)
    ]
