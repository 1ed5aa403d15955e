"""A write's n8n record is kept until its write is settled, then deleted (issue 27 §6; N8nRuntime
SPEC "What n8n keeps"), two users on the real stack (n8n + Radicale + the ledger): alice's and
bob's meetings complete, so the records of their writes go; a record of bob's whose write the
ledger holds ``unknown`` stays (the reconciler needs it) until that write is settled too."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import httpx
import pytest

from countersign.api.services.pruning import PruneDesk
from countersign.api.testing import ALICE, BOB, ApiHarness, meeting_body
from countersign.kernel import sha256_hex
from countersign.n8n import N8nClient, N8nHandle
from countersign.n8n.keeping import carried_key, owner_plan, prune_settled

pytestmark = pytest.mark.slow


def _executions(n8n: N8nHandle) -> list[dict[str, Any]]:
    async def scan() -> list[dict[str, Any]]:
        async with N8nClient(n8n.base_url, n8n.api_key) as client:
            return [ex async for page in client.execution_pages(include_data=True) for ex in page]

    return asyncio.run(scan())


def _meeting(c: httpx.Client, title: str, day: int) -> str:
    r = c.post("/v1/intents", json=meeting_body(title, day=day, hours=2))
    assert r.status_code == 201, r.text
    plan_id: str = r.json()["plan_id"]
    options = c.get(f"/v1/plans/{plan_id}").json()["gates"][0]["choices"]["options"]
    r = c.post(f"/v1/plans/{plan_id}/gates/gate-A/approve", json={"choice": options[0]["value"]})
    assert r.status_code == 200, r.text
    done = c.post(f"/v1/plans/{plan_id}/execute", json={"tokens": {"gate-A": r.json()["token"]}})
    assert done.status_code == 202 and done.json()["status"] == "completed", done.text
    return plan_id


def _resend_unsettled(api: ApiHarness, n8n: N8nHandle, write: dict[str, Any]) -> str:
    """Send ``write``'s request again under a key the ledger holds ``unknown`` (claimed, sent,
    its answer lost), as an execute cut short leaves it; that key."""
    body = copy.deepcopy(write["data"]["resultData"]["runData"]["Trigger"][0]["data"]["main"])
    request = body[0][0]["json"]["body"]
    request["plan"]["step"] += 100  # another write of the same plan: its own key
    fake = {"data": {"resultData": {"runData": {"Trigger": [{"data": {"main": body}}]}}}}
    key = carried_key(fake)
    assert key is not None
    ledger = api.services.runtime.executor.ledger
    ledger.claim(key, sha256_hex(key.encode()), owner="test")
    ledger.mark_sent(key, owner="test")

    async def send() -> None:
        async with N8nClient(n8n.base_url, n8n.api_key) as client:
            flow = await client.get_workflow(str(write["workflowId"]))
            trigger = next(n for n in flow["nodes"] if n["name"] == "Trigger")
            await client.call_webhook(trigger["parameters"]["path"], request, write=True)

    asyncio.run(send())
    ledger.mark_unknown(key, "the answer was lost (test)", owner="test")
    return key


def _prune(api: ApiHarness, n8n: N8nHandle) -> list[str]:
    desk = PruneDesk(api.services.runtime)

    async def run() -> list[str]:
        async with N8nClient(n8n.base_url, n8n.api_key) as client:
            return await prune_settled(client, settled=desk.settled)

    return asyncio.run(run())


def test_only_the_records_of_settled_writes_go(api: ApiHarness, n8n: N8nHandle) -> None:
    with api.client(ALICE) as alice:
        alices = _meeting(alice, "Pruned sync", day=11)
    with api.client(BOB) as bob:
        bobs = _meeting(bob, "Bob pruned sync", day=12)
    held = _executions(n8n)
    settled = {
        str(e["id"]): owner_plan(e)
        for e in held
        if owner_plan(e) in {alices, bobs} and carried_key(e) is not None
    }
    assert alices in settled.values() and bobs in settled.values(), "both kept their writes"
    bobs_write = next(
        e for e in held if owner_plan(e) == bobs and "create_event" in e["workflowData"]["name"]
    )
    unknown = _resend_unsettled(api, n8n, bobs_write)
    pending = [str(e["id"]) for e in _executions(n8n) if carried_key(e) == unknown]
    assert len(pending) == 1

    gone = _prune(api, n8n)
    assert set(settled) <= set(gone), "every settled write's record goes, alice's and bob's"
    assert pending[0] not in gone
    left = {str(e["id"]) for e in _executions(n8n)}
    assert not set(settled) & left
    assert pending[0] in left, "bob's unknown write keeps its record for the reconciler"

    # once that write is settled (the reconciler, or a person), its record goes too
    api.services.runtime.executor.ledger.reconcile(unknown, outcome="completed", actor="test")
    assert pending[0] in _prune(api, n8n)
    assert pending[0] not in {str(e["id"]) for e in _executions(n8n)}
