"""Redaction in n8n's own database, read back through n8n's API (N8nRuntime SPEC "What n8n
keeps"): n8n parses the record it finds after the edit, the forgotten address is gone, the rest
is as it was and the key still finds the request — on SQLite (one process) and on PostgreSQL
(queue mode)."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from psycopg.conninfo import make_conninfo

from countersign.kernel import Settings, content_hash
from countersign.n8n import N8nClient, N8nHandle, install, stop
from countersign.n8n.executions import KeyRef
from countersign.n8n.keeping import (
    FORGOTTEN,
    ExecutionStore,
    PostgresExecutionStore,
    SqliteExecutionStore,
    mention_pattern,
)
from countersign.n8n.queue import N8nDatabase, start_queue
from countersign.storage.db import embedded_server

pytestmark = pytest.mark.slow

BOB = "bob@example.com"
ARGS = {"to": [BOB, "erin@example.com"], "title": "Sync", "n": 2}


def _workflow(path: str) -> dict[str, Any]:
    js = "return [{json: {sent: true, to: $input.first().json.body.args.to}}];"
    return {
        "name": f"keeping {path}",
        "nodes": [
            {
                "id": "t",
                "name": "Trigger",
                "type": "n8n-nodes-base.webhook",
                "typeVersion": 2,
                "position": [0, 0],
                "webhookId": f"wh-{path}",
                "parameters": {
                    "httpMethod": "POST",
                    "path": path,
                    "responseMode": "lastNode",
                    "options": {},
                },
            },
            {
                "id": "c",
                "name": "Code",
                "type": "n8n-nodes-base.code",
                "typeVersion": 2,
                "position": [300, 0],
                "parameters": {
                    "mode": "runOnceForAllItems",
                    "language": "javaScript",
                    "jsCode": js,
                },
            },
        ],
        "connections": {"Trigger": {"main": [[{"node": "Code", "type": "main", "index": 0}]]}},
        "settings": {"executionOrder": "v1", "saveDataSuccessExecution": "all"},
    }


async def _redacted_round_trip(handle: N8nHandle, store: ExecutionStore, path: str) -> None:
    async with N8nClient(handle.base_url, handle.api_key) as c:
        created = await c.create_workflow(_workflow(path))
        await c.activate(created["id"])
        body = {"plan": {"plan_id": "PLANKEEP", "step": 4}, "args": ARGS}
        for _ in range(40):  # webhook registration is asynchronous on 2.x
            try:
                await c.call_webhook(path, body)
                break
            except Exception:
                await asyncio.sleep(0.25)
        page, _ = await c.executions_page(workflow_id=str(created["id"]))
        eid = str(page[0]["id"])
        before = await c.get_execution(eid)
        assert BOB in str(before)
        pattern = mention_pattern([BOB])
        assert pattern is not None
        assert await asyncio.to_thread(store.redact, eid, pattern)
        after = await c.get_execution(eid)  # n8n parses the edited record
    text = str(after)
    assert BOB not in text and FORGOTTEN in text and "erin@example.com" in text
    run = after["data"]["resultData"]["runData"]
    sent = run["Trigger"][0]["data"]["main"][0][0]["json"]["body"]
    assert sent["args"] == {**ARGS, "to": [FORGOTTEN, "erin@example.com"]}
    assert sent["countersign_redacted"] == {"arg_hash": content_hash(ARGS)}
    assert run["Code"][0]["data"]["main"][0][0]["json"] == {
        "sent": True,
        "to": [FORGOTTEN, "erin@example.com"],
    }
    now = datetime.now(UTC)
    assert KeyRef("PLANKEEP", 4, content_hash(ARGS), now, now).carried_by(after) is True
    assert not await asyncio.to_thread(store.redact, "999999", pattern)  # no such row
    async with N8nClient(handle.base_url, handle.api_key) as c:
        await c.delete_execution(eid)  # the session's n8n is shared: leave no one's address


def test_redaction_in_n8n_sqlite(n8n: N8nHandle) -> None:
    store = SqliteExecutionStore.of(n8n.data_dir)
    assert store.path.exists()
    asyncio.run(_redacted_round_trip(n8n, store, "keep-sqlite"))


@pytest.fixture
def pg(tmp_path: Path) -> Iterator[str]:
    with embedded_server(tmp_path / "pg") as url:
        yield url


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed")
def test_redaction_in_n8n_postgres_queue_mode(pg: str, tmp_path: Path) -> None:
    data = tmp_path / "n8n"
    h = start_queue(install(Settings().cache_dir), data, database_url=pg, workers=1)
    try:
        db = N8nDatabase.from_url(pg)
        dsn = make_conninfo(
            host=db.host, port=db.port, user=db.user, password=db.password, dbname=db.database
        )
        assert "hunter" not in repr(PostgresExecutionStore(dsn + " password=hunter"))
        asyncio.run(_redacted_round_trip(h.main, PostgresExecutionStore(dsn), "keep-pg"))
    finally:
        stop(data)
