"""Gate rules over the person's facts on the real stack (issue 26 §1): under a policy that gates
"a mail to a recipient outside my contacts" (``not_in_set: [contacts, self]``), a meeting with a
contact is planned without that reason (the Planner reads the contact from the evidence: the
intent allows T2), and
executes while the contact stands; the same plan approved, then the contact removed (the ground
moving), is refused at execute — the executor reads the live contacts — audited, nothing written
at either calendar or the mailbox."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from countersign.api.testing import ALICE, BOB, ApiHarness, meeting_body
from countersign.kernel import DEFAULT_RULES, Policy
from countersign.kernel.rules import MAIL_OUTSIDE_CONTACTS

pytestmark = pytest.mark.slow


def _approved(c: httpx.Client, title: str, day: int) -> tuple[str, str, list[str]]:
    """A meeting of Alice and Bob planned, previewed and approved: plan id, token, gate rules."""
    body = meeting_body(title, day=day, hours=3)
    body["intent"]["context_budget"] = 2  # the memory's contacts (T2) are evidence
    r = c.post("/v1/intents", json=body)
    assert r.status_code == 201, r.text
    plan_id = r.json()["plan_id"]
    gate = next(s for s in r.json()["plan"]["graph"] if s.get("gate_id") == "gate-A")
    rules = [b["rule"] for b in gate["args"]["because"]]
    assert c.post(f"/v1/plans/{plan_id}/preview").status_code == 200
    slot = c.get(f"/v1/plans/{plan_id}").json()["gates"][0]["choices"]["options"][0]
    r = c.post(f"/v1/plans/{plan_id}/gates/gate-A/approve", json={"choice": slot["value"]})
    assert r.status_code == 200, r.text
    return plan_id, r.json()["token"], rules


def _execute(c: httpx.Client, plan_id: str, token: str) -> Any:
    return c.post(f"/v1/plans/{plan_id}/execute", json={"tokens": {"gate-A": token}})


def test_a_contact_removed_after_approval_refuses_the_mail(api: ApiHarness) -> None:
    policy = Policy(
        providers=api.services.planning.policy.providers,
        rules=(*DEFAULT_RULES, MAIL_OUTSIDE_CONTACTS),
    )
    runtime, planning = api.services.runtime, api.services.planning
    before_exec, before_policy = runtime.executor, planning.policy
    runtime.executor = replace(before_exec, policy=policy)
    planning.policy = policy
    try:
        with api.client() as c:
            r = c.post("/v1/memory/facts", json={"contacts": [{"name": "Bob", "email": BOB}]})
            assert r.status_code == 201, r.text
            # the contact stands: planned without the reason, and it runs
            kept, token, rules = _approved(c, "Kept", day=2)
            assert rules == ["calendar-write", "mail-send"]
            r = _execute(c, kept, token)
            assert r.status_code in (200, 202) and r.json()["status"] == "completed", r.text
            assert len(api.smtp.messages) == 2
            # approved, then the contact removed: the mail to Bob is outside now
            moved, token, rules = _approved(c, "Moved", day=3)
            assert rules == ["calendar-write", "mail-send"]
            events = (sorted(api.radicale.events(ALICE)), sorted(api.radicale.events(BOB)))
            with api.db.tx() as conn:
                conn.execute(
                    text("DELETE FROM contacts WHERE user_id = :u AND email = :e"),
                    {"u": ALICE, "e": BOB},
                )
            r = _execute(c, moved, token)
    finally:
        runtime.executor, planning.policy = before_exec, before_policy
    assert r.status_code == 403 and r.json()["code"] == "policy_refused", r.text
    assert "mail-outside-contacts" in r.json()["detail"]
    assert (sorted(api.radicale.events(ALICE)), sorted(api.radicale.events(BOB))) == events
    assert len(api.smtp.messages) == 2
    with api.db.tx() as conn:
        n = conn.execute(
            text("SELECT count(*) FROM audit_log WHERE plan_id = :p AND reason = 'policy_refused'"),
            {"p": moved},
        ).scalar_one()
    assert n == 1
