"""Settling an execute that was cut short, over HTTP on the real stack (Api: GET
/v1/plans/{id}/settlement, POST .../finish, POST .../undo; ExecuteOrchestrator SPEC 10).

The cut is made as a crash leaves it: before the execute, Bob's event write is claimed, sent and
lost by a holder that died two minutes ago (its key ``unknown``). The execute writes Alice's
event and stops at Bob's: half a meeting, the plan ``running``. The card then says what is known
(finish is not offered while a write is unknown); "finish" settles Bob's write from evidence —
n8n has no execution of it, Bob's calendar (read by the event's UID) has no event — and sends the
missing writes under the approval already spent: the meeting is whole, each write once.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from countersign.api.testing import ALICE, BOB, ApiHarness
from countersign.audit import AuditLog
from countersign.binding import resolve_refs
from countersign.kernel import Plan, content_hash, system_clock
from countersign.steps import check_choice, gate_offer, idempotency_key
from countersign.storage import IdempotencyLedger, PlanStore

pytestmark = pytest.mark.slow


def _meeting(title: str) -> dict[str, Any]:
    day = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
    start, end = day + timedelta(hours=13), day + timedelta(hours=18)
    entities = {
        "participants": [ALICE, BOB],
        "duration_min": 30,
        "title": title,
        "window_start": start.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "window_end": end.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    return {"intent": {"intent": "schedule_meeting", "entities": entities}}


def _slot(preview: dict[str, Any]) -> dict[str, str]:
    slot = preview["normalized"]["steps"]["3"]["slots"][0]
    start = datetime.fromisoformat(slot["start"].replace("Z", "+00:00"))
    end = (start + timedelta(minutes=30)).isoformat().replace("+00:00", "Z")
    return {"start": slot["start"], "end": end}


def _lose_bobs_write(
    api: ApiHarness, body: dict[str, Any], slot: dict[str, str], *, aged: bool = True
) -> str:
    """Bob's event write (step 6) claimed, sent and lost two minutes ago (``aged=False``: just
    now, too recent for the missing evidence to prove it never happened); its key."""
    plan = Plan.model_validate(body["plan"])
    outputs, _ = PlanStore(api.db, clock=system_clock).preview_of(plan.plan_id)
    registry = api.services.runtime.registry
    choice = check_choice(gate_offer(plan, registry, "gate-A", outputs), slot, now=None)
    args = resolve_refs(plan.step(6).args, outputs, {"gate-A": choice})
    key = idempotency_key(plan.plan_id, 6, args)
    ledger = IdempotencyLedger(api.db, clock=system_clock, audit=AuditLog(clock=system_clock))
    ledger.claim(key, content_hash(dict(args)), owner="api-that-died")
    ledger.mark_sent(key, owner="api-that-died")
    ledger.mark_unknown(key, "the API process died during the send", owner="api-that-died")
    if not aged:
        return key
    with api.db.tx() as c:
        c.execute(
            text(
                "UPDATE idempotency_keys SET sent_at = sent_at - interval '2 minutes', "
                "created_at = created_at - interval '2 minutes', "
                "updated_at = updated_at - interval '2 minutes' WHERE key = :k"
            ),
            {"k": key},
        )
    return key


def _cut_short(api: ApiHarness, alice: httpx.Client, title: str, *, aged: bool = True) -> str:
    """A meeting whose execute stopped after Alice's event (Bob's write unknown); its plan id."""
    body = alice.post("/v1/intents", json=_meeting(title)).json()
    plan_id = str(body["plan_id"])
    slot = _slot(body["preview"])
    token = alice.post(f"/v1/plans/{plan_id}/gates/gate-A/approve", json={"choice": slot})
    assert token.status_code == 200, token.text
    _lose_bobs_write(api, body, slot, aged=aged)
    r = alice.post(
        f"/v1/plans/{plan_id}/execute", json={"tokens": {"gate-A": token.json()["token"]}}
    )
    assert r.status_code == 409 and r.json()["code"] == "idempotency_outcome_unknown", r.text
    assert (len(api.radicale.events(ALICE)), len(api.radicale.events(BOB))) == (1, 0)
    assert alice.get(f"/v1/plans/{plan_id}").json()["status"] == "running"
    return plan_id


def test_finish_settles_from_the_provider_and_completes_the_meeting_once(
    api: ApiHarness,
) -> None:
    with api.client() as alice, api.client(BOB) as bob:
        plan_id = _cut_short(api, alice, "Cut short, finished")
        shown = alice.get(f"/v1/plans/{plan_id}/settlement")
        assert shown.status_code == 200, shown.text
        known = shown.json()
        assert known["writes"] == {"5": "done", "6": "unknown", "7": "pending", "8": "pending"}
        assert known["status"] == "unknown" and known["offers"] == ["undo"]
        assert bob.get(f"/v1/plans/{plan_id}/settlement").status_code == 404
        assert bob.post(f"/v1/plans/{plan_id}/finish").status_code == 404
        done = alice.post(f"/v1/plans/{plan_id}/finish")
        assert done.status_code == 200, done.text
        assert done.json()["status"] == "completed", done.json()
        assert done.json()["writes"] == {"5": "done", "6": "done", "7": "done", "8": "done"}
        assert (len(api.radicale.events(ALICE)), len(api.radicale.events(BOB))) == (1, 1)
        assert len(api.smtp.to(ALICE)) == 1 and len(api.smtp.to(BOB)) == 1
        assert alice.get(f"/v1/plans/{plan_id}").json()["status"] == "completed"
        again = alice.post(f"/v1/plans/{plan_id}/finish")
        assert again.status_code == 409 and again.json()["code"] == "execute_refused"
        assert len(api.radicale.events(BOB)) == 1 and len(api.smtp.messages) == 2


def test_undo_takes_the_half_meeting_back(api: ApiHarness) -> None:
    with api.client() as alice:
        plan_id = _cut_short(api, alice, "Cut short, undone")
        undone = alice.post(f"/v1/plans/{plan_id}/undo")
        assert undone.status_code == 200, undone.text
        assert undone.json()["status"] == "undone"
        assert undone.json()["writes"]["5"] == "compensated"
        assert (len(api.radicale.events(ALICE)), len(api.radicale.events(BOB))) == (0, 0)
        assert api.smtp.messages == []
        assert alice.get(f"/v1/plans/{plan_id}").json()["status"] == "failed"
        assert alice.post(f"/v1/plans/{plan_id}/undo").status_code == 409


def test_a_settlement_that_asks_the_person_is_the_plans_status(api: ApiHarness) -> None:
    """Bob's write lost just now: nothing can prove it never happened, so "finish" settles what
    it can, ends the execute asking the person, and is refused. The plan then reads
    ``needs_attention`` wherever its status is shown (the plan, the list, the settlement), not
    ``unknown``; the person's undo ends it ``failed``."""
    with api.client() as alice:
        plan_id = _cut_short(api, alice, "Cut short, asked", aged=False)
        refused = alice.post(f"/v1/plans/{plan_id}/finish")
        assert refused.status_code == 409 and refused.json()["code"] == "execute_refused"
        known = alice.get(f"/v1/plans/{plan_id}/settlement").json()
        assert known["status"] == "needs_attention" and known["offers"] == ["undo"], known
        assert known["writes"]["6"] == "unknown"
        assert alice.get(f"/v1/plans/{plan_id}").json()["status"] == "needs_attention"
        listed = alice.get("/v1/plans", params={"limit": 50}).json()["items"]
        assert [p["status"] for p in listed if p["plan_id"] == plan_id] == ["needs_attention"]
        undone = alice.post(f"/v1/plans/{plan_id}/undo")
        assert undone.status_code == 200 and undone.json()["status"] == "undone", undone.text
        assert alice.get(f"/v1/plans/{plan_id}").json()["status"] == "failed"
        assert (len(api.radicale.events(ALICE)), len(api.radicale.events(BOB))) == (0, 0)
