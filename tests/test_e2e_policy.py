"""Gate rules on the real stack (issue 26 §1): a meeting's card shows why its gate is there
(the rules, in the signed plan), and a plan made under one policy is refused at execute under a
stricter one — the rule added since gates its writes and its gate does not say so — audited,
nothing written at either calendar or the mailbox."""

from __future__ import annotations

from dataclasses import replace

import pytest
from sqlalchemy import text

from countersign.api.testing import ALICE, BOB, ApiHarness, meeting_body
from countersign.kernel import DEFAULT_RULES, GateRule, Policy

pytestmark = pytest.mark.slow


def test_the_gate_says_why_and_a_stricter_policy_refuses_the_write(api: ApiHarness) -> None:
    runtime = api.services.runtime
    with api.client() as c:
        r = c.post("/v1/intents", json=meeting_body("Ruled", day=2, hours=3))
        assert r.status_code == 201, r.text
        plan_id = r.json()["plan_id"]
        gate = next(s for s in r.json()["plan"]["graph"] if s.get("gate_id") == "gate-A")
        assert [b["rule"] for b in gate["args"]["because"]] == ["calendar-write", "mail-send"]
        assert c.post(f"/v1/plans/{plan_id}/preview").status_code == 200
        slot = c.get(f"/v1/plans/{plan_id}").json()["gates"][0]["choices"]["options"][0]
        token = c.post(
            f"/v1/plans/{plan_id}/gates/gate-A/approve", json={"choice": slot["value"]}
        ).json()["token"]
        added = GateRule.model_validate(
            {
                "id": "bob-needs-more",
                "op": "*.create_event",
                "then": "gate",
                "where": {"user": {"eq": BOB}},
                "because": "it writes to Bob's calendar",
            }
        )
        before = runtime.executor
        runtime.executor = replace(before, policy=Policy(rules=(*DEFAULT_RULES, added)))
        try:
            r = c.post(f"/v1/plans/{plan_id}/execute", json={"tokens": {"gate-A": token}})
        finally:
            runtime.executor = before
    assert r.status_code == 403 and r.json()["code"] == "policy_refused", r.text
    assert "bob-needs-more" in r.json()["detail"]
    assert api.radicale.events(ALICE) == [] and api.radicale.events(BOB) == []
    assert api.smtp.messages == []
    with api.db.tx() as conn:
        n = conn.execute(
            text("SELECT count(*) FROM audit_log WHERE plan_id = :p AND reason = 'policy_refused'"),
            {"p": plan_id},
        ).scalar_one()
    assert n == 1
