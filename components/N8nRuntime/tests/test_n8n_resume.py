"""A Wait node paused on the real n8n 2.41.1 is resumed by the client only with its signed URL.

The resume URL is ``<WEBHOOK_URL>webhook-waiting/<execution id>?signature=<64 hex>``; without the
signature, or with a wrong one, n8n answers 401; a second resume answers 409. (The public API
returns the stored signature token with an execution's data: the API key is as sensitive as an
approval. Only the orchestrator holds it.)
"""

from __future__ import annotations

import asyncio
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from countersign.n8n import N8nApiError, N8nClient, N8nHandle


def node(i: str, name: str, typ: str, ver: float, params: dict[str, Any], x: int) -> dict[str, Any]:
    return {
        "id": i,
        "name": name,
        "type": typ,
        "typeVersion": ver,
        "position": [x, 0],
        "parameters": params,
    }


def _wait_wf(path: str) -> dict[str, Any]:
    trig = node(
        "w1",
        "Trigger",
        "n8n-nodes-base.webhook",
        2,
        {"httpMethod": "POST", "path": path, "responseMode": "responseNode", "options": {}},
        0,
    )
    trig["webhookId"] = f"wh-{path}"
    respond = node(
        "w2",
        "Respond",
        "n8n-nodes-base.respondToWebhook",
        1.1,
        {
            "respondWith": "json",
            "responseBody": "={{ JSON.stringify({resumeUrl: $execution.resumeUrl, id: $execution.id}) }}",
            "options": {},
        },
        200,
    )
    wait = node(
        "w3",
        "Wait",
        "n8n-nodes-base.wait",
        1.1,
        {"resume": "webhook", "httpMethod": "POST", "options": {}},
        400,
    )
    wait["webhookId"] = f"wait-{path}"
    done = node(
        "w4",
        "Done",
        "n8n-nodes-base.code",
        2,
        {
            "mode": "runOnceForAllItems",
            "language": "javaScript",
            "jsCode": "return [{json: {resumedWith: $input.first().json.body}}];",
        },
        600,
    )
    return {
        "name": f"probe {path}",
        "nodes": [trig, respond, wait, done],
        "connections": {
            "Trigger": {"main": [[{"node": "Respond", "type": "main", "index": 0}]]},
            "Respond": {"main": [[{"node": "Wait", "type": "main", "index": 0}]]},
            "Wait": {"main": [[{"node": "Done", "type": "main", "index": 0}]]},
        },
        "settings": {"executionOrder": "v1"},
    }


async def _status(c: N8nClient, eid: str, want: str, timeout: float = 10) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        ex = await c.get_execution(eid, include_data=True)
        if ex.get("status") == want or time.monotonic() > deadline:
            return ex
        await asyncio.sleep(0.1)


def test_wait_node_resumed_by_client(n8n: N8nHandle) -> None:
    async def go() -> None:
        async with N8nClient(n8n.base_url, n8n.api_key) as c:
            wf = await c.create_workflow(_wait_wf("probe-wait"))
            await c.activate(wf["id"])
            out = await c.call_webhook("probe-wait", {"x": 1})
            url, eid = out["resumeUrl"], str(out["id"])
            assert "/webhook-waiting/" in url
            assert len(parse_qs(urlsplit(url).query)["signature"][0]) == 64
            ex = await _status(c, eid, "waiting")
            assert ex["status"] == "waiting"
            waiting = await c.list_executions(workflow_id=wf["id"], status="waiting")
            assert [str(e["id"]) for e in waiting] == [eid]
            # unsigned / wrongly signed resume is refused
            with pytest.raises(N8nApiError) as info:
                await c.resume(url.split("?")[0], {"ok": True})
            assert info.value.status == 401
            with pytest.raises(N8nApiError) as info:
                await c.resume(url[:-4] + "0000", {"ok": True})
            assert info.value.status == 401
            await c.resume(url, {"approved": True})
            ex = await _status(c, eid, "success")
            assert ex["status"] == "success"
            run = ex["data"]["resultData"]["runData"]["Done"][0]["data"]["main"][0][0]["json"]
            assert run == {"resumedWith": {"approved": True}}
            with pytest.raises(N8nApiError) as info:
                await c.resume(url, {"approved": True})
            assert info.value.status == 409

    asyncio.run(go())
