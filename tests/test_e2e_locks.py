"""Resource locks on the real stack (issue 26 §2): two meeting plans for the same half hour,
approved with the same slot and executed at the same moment through the API, never both write.

The outside measurement this answers: both completed and both wrote in 5 of 5 rounds, because
each plan's staleness re-check ran before either write landed. With the calendars locked from the
re-check to the last write, the second plan waits, re-reads, sees the first one's event and is
refused as stale (409 ``stale_world``, nothing written), so the person is offered a fresh preview.
Counted at the providers: one event per attendee, one mail per attendee, per round.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from threading import Barrier
from typing import Any

import httpx
import pytest

from countersign.api.testing import ALICE, BOB, ApiHarness, meeting_body

pytestmark = pytest.mark.slow

ROUNDS = 5


def _approved(c: httpx.Client, body: dict[str, Any]) -> tuple[str, str]:
    r = c.post("/v1/intents", json=body)
    assert r.status_code == 201, r.text
    plan_id: str = r.json()["plan_id"]
    assert c.post(f"/v1/plans/{plan_id}/preview").status_code == 200
    options = c.get(f"/v1/plans/{plan_id}").json()["gates"][0]["choices"]["options"]
    assert len(options) == 1, options
    r = c.post(f"/v1/plans/{plan_id}/gates/gate-A/approve", json={"choice": options[0]["value"]})
    assert r.status_code == 200, r.text
    return plan_id, str(r.json()["token"])


def _execute(api: ApiHarness, plan: tuple[str, str], start: Barrier) -> tuple[int, str]:
    """Execute one approved plan, both threads released at once."""
    with api.client() as c:
        start.wait()
        r = c.post(f"/v1/plans/{plan[0]}/execute", json={"tokens": {"gate-A": plan[1]}})
    body = r.json()
    return r.status_code, str(body.get("code") or body.get("status"))


def test_two_plans_for_one_slot_executed_at_once_write_once(api: ApiHarness) -> None:
    outcomes: list[list[tuple[int, str]]] = []
    for n in range(ROUNDS):
        before = (len(api.radicale.events(ALICE)), len(api.radicale.events(BOB)))
        mails = len(api.smtp.messages)
        with api.client() as c:
            plans = [
                _approved(c, meeting_body(f"Race {n} {who}", day=n + 1, hours=0.5)) for who in "ab"
            ]
        with ThreadPoolExecutor(2) as pool:
            got = sorted(pool.map(_execute, [api] * 2, plans, [Barrier(2)] * 2))
        outcomes.append(got)
        assert got == [(202, "completed"), (409, "stale_world")], (n, got)
        after = (len(api.radicale.events(ALICE)), len(api.radicale.events(BOB)))
        assert after == (before[0] + 1, before[1] + 1), f"round {n}: double-booked {after}"
        assert len(api.smtp.messages) == mails + 2, f"round {n}: one invitation per attendee"
    assert len(outcomes) == ROUNDS
