"""What n8n keeps about people, two users on the real stack (n8n + Radicale; issue 27 §6):
alice's preview of a meeting with bob reads bob's calendar, and no n8n execution of hers keeps
bob's event titles; bob forgets everything: alice's executions stay, bob's address redacted in
them, and her write is still found by its idempotency key (the reconciler's lookup)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from countersign.api.testing import ALICE, BOB, ApiHarness, meeting_body
from countersign.kernel import content_hash
from countersign.n8n import N8nClient, N8nHandle
from countersign.n8n.executions import KeyRef, RecordScan, find_execution, read_node
from countersign.n8n.keeping import FORGOTTEN, SqliteExecutionStore, owner_plan

pytestmark = pytest.mark.slow

SECRET = "Bobs dentist appointment zq7"


def _executions(n8n: N8nHandle) -> list[dict[str, Any]]:
    async def scan() -> list[dict[str, Any]]:
        async with N8nClient(n8n.base_url, n8n.api_key) as client:
            return [ex async for page in client.execution_pages(include_data=True) for ex in page]

    return asyncio.run(scan())


def _approved(c: httpx.Client, body: dict[str, Any]) -> tuple[str, str]:
    r = c.post("/v1/intents", json=body)
    assert r.status_code == 201, r.text
    plan_id: str = r.json()["plan_id"]
    options = c.get(f"/v1/plans/{plan_id}").json()["gates"][0]["choices"]["options"]
    r = c.post(f"/v1/plans/{plan_id}/gates/gate-A/approve", json={"choice": options[0]["value"]})
    assert r.status_code == 200, r.text
    return plan_id, str(r.json()["token"])


def _execute(c: httpx.Client, plan: tuple[str, str]) -> None:
    r = c.post(f"/v1/plans/{plan[0]}/execute", json={"tokens": {"gate-A": plan[1]}})
    assert r.status_code == 202 and r.json()["status"] == "completed", r.text


def _bobs_own(day: int) -> dict[str, Any]:
    body = meeting_body(SECRET, day=day, hours=0.5)
    body["intent"]["entities"]["participants"] = [BOB]
    return body


def test_previews_keep_nothing_and_a_forget_redacts_other_peoples_records(
    api: ApiHarness, n8n: N8nHandle
) -> None:
    api.services.memory.n8n_store = SqliteExecutionStore.of(n8n.data_dir)
    day = 9
    with api.client(BOB) as bob:
        bobs = _approved(bob, _bobs_own(day))
        _execute(bob, bobs)
    folder = api.radicale.folder / "collection-root" / BOB / "calendar"
    assert any(SECRET in (folder / e).read_text() for e in api.radicale.events(BOB))
    with api.client(ALICE) as alice:
        r = alice.post("/v1/intents", json=meeting_body("Sync zq7", day=day, hours=2))
        assert r.status_code == 201, r.text
        previewed = r.json()["plan_id"]
        mine = _approved(alice, meeting_body("Sync zq7 booked", day=day, hours=2))
        _execute(alice, mine)

    held = _executions(n8n)
    # no kept record holds n8n's API key (a webhook call's headers are its trigger's output)
    assert held and not [e["id"] for e in held if n8n.api_key in json.dumps(e)]
    # no execution of alice's holds bob's event title: her previews' reads kept nothing
    hers = [e for e in held if owner_plan(e) in {previewed, mine[0]}]
    assert not [e["id"] for e in hers if SECRET.lower() in json.dumps(e).lower()]
    # only writes were kept: alice's approved plan's create_event and mails, none of a preview
    assert hers and all(owner_plan(e) == mine[0] for e in hers)
    names = {str((e.get("workflowData") or {}).get("name")) for e in hers}
    assert all(" op caldav.create_event" in n or " op smtp." in n for n in names), names
    naming_bob = [e for e in hers if BOB in json.dumps(e)]
    assert naming_bob
    write = next(e for e in naming_bob if "create_event" in str(e["workflowData"]["name"]))
    body = write["data"]["resultData"]["runData"]["Trigger"][0]["data"]["main"][0][0]["json"]
    sent = body["body"]
    key = KeyRef(
        plan_id=mine[0],
        step=sent["plan"]["step"],
        arg_hash=content_hash(sent["args"]),
        sent_at=datetime.fromisoformat(write["startedAt"].replace("Z", "+00:00")),
        last_wait=datetime.now(UTC),
    )
    bobs_plans = {bobs[0]}
    assert any(owner_plan(e) in bobs_plans for e in held)  # bob's own write was kept too

    with api.client(BOB) as bob:
        r = bob.post("/v1/memory/forget", json={"all": True})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["n8n_executions_redacted"] >= len(naming_bob), out
    assert out["n8n_executions_deleted"] >= 1, out

    after = {str(e["id"]): e for e in _executions(n8n)}
    # alice's executions all remain, bob's address redacted in every one of them
    assert {str(e["id"]) for e in hers} <= set(after)
    for e in hers:
        text_ = json.dumps(after[str(e["id"])]).lower()
        assert BOB not in text_ and bobs[0].lower() not in text_
    assert all(FORGOTTEN in json.dumps(after[str(e["id"])]) for e in naming_bob)
    assert ALICE in json.dumps(after[str(write["id"])])  # only bob went
    # bob's own executions are gone
    assert not [i for i, e in after.items() if owner_plan(e) in bobs_plans]

    # the reconciler still finds alice's write by its key, and reads the op's answer
    async def lookup() -> tuple[str, str]:
        async with N8nClient(n8n.base_url, n8n.api_key) as client:
            found = await find_execution(
                client,
                workflow_name=str(write["workflowData"]["name"]),
                key=key,
                now=datetime.now(UTC) + timedelta(seconds=1),
                scan=RecordScan(skew=timedelta(seconds=1), settle=timedelta(0)),
            )
            assert found.execution is not None, found
            node = str(write["data"]["resultData"]["lastNodeExecuted"])
            return found.kind, read_node(found.execution, node).kind

    assert asyncio.run(lookup()) == ("found", "answered")

    # the session's n8n is shared: alice's records of this test go (they name her)
    async def clean() -> None:
        async with N8nClient(n8n.base_url, n8n.api_key) as client:
            for e in hers:
                await client.delete_execution(str(e["id"]))

    asyncio.run(clean())
