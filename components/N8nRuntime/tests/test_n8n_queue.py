"""n8n in queue mode on this machine: a main process, two workers, Redis and n8n's data on the
embedded PostgreSQL. Webhook calls are answered by whichever worker takes the job; stopping the
main process stops its workers and Redis; a second start reuses the database and the API key."""

from __future__ import annotations

import asyncio
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from countersign.kernel import Settings
from countersign.kernel.process import alive, read_pid
from countersign.n8n import N8nClient, install, stop
from countersign.n8n.queue import N8nDatabase, QueueHandle, start_queue
from countersign.storage.db import embedded_server

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed"),
]


@pytest.fixture(scope="module")
def pg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with embedded_server(tmp_path_factory.mktemp("queue-pg") / "pg") as url:
        yield url


def test_database_target_from_countersign_urls() -> None:
    sock = N8nDatabase.from_url("postgresql+psycopg://postgres:@/postgres?host=/tmp/x/pg")
    assert (sock.host, sock.port, sock.user, sock.database) == (
        "/tmp/x/pg",
        5432,
        "postgres",
        "n8n",
    )
    tcp = N8nDatabase.from_url("postgresql://cs:p%40ss@db.internal:6543/countersign")
    assert (tcp.host, tcp.port, tcp.user, tcp.password) == ("db.internal", 6543, "cs", "p@ss")
    assert tcp.env()["DB_TYPE"] == "postgresdb"


async def _calls(h: QueueHandle, n: int, *, deploy: bool = True) -> list[object]:
    async with N8nClient(h.main.base_url, h.main.api_key) as c:
        if deploy:
            js = "return [{json: {echo: $input.first().json.body.x}}];"
            await _deploy(c, _webhook_code("q", js))
        for _ in range(40):  # webhook registration is asynchronous on 2.x
            try:
                await c.call_webhook("q", {"x": -1})
                break
            except Exception:  # "not registered yet" until it is
                await asyncio.sleep(0.25)
        outs = await asyncio.gather(*[c.call_webhook("q", {"x": i}) for i in range(n)])
        return [o["echo"] for o in outs]


def _webhook_code(path: str, js: str) -> dict[str, Any]:
    trigger = {"httpMethod": "POST", "path": path, "responseMode": "lastNode", "options": {}}
    code = {"mode": "runOnceForAllItems", "language": "javaScript", "jsCode": js}
    return {
        "name": f"queue {path}",
        "nodes": [
            {
                "id": "t",
                "name": "Trigger",
                "type": "n8n-nodes-base.webhook",
                "typeVersion": 2,
                "position": [0, 0],
                "webhookId": f"wh-{path}",
                "parameters": trigger,
            },
            {
                "id": "c",
                "name": "Code",
                "type": "n8n-nodes-base.code",
                "typeVersion": 2,
                "position": [300, 0],
                "parameters": code,
            },
        ],
        "connections": {"Trigger": {"main": [[{"node": "Code", "type": "main", "index": 0}]]}},
        "settings": {"executionOrder": "v1"},
    }


async def _deploy(c: N8nClient, wf: dict[str, Any]) -> str:
    created = await c.create_workflow(wf)
    await c.activate(created["id"])
    return str(created["id"])


def _jobs(log: Path) -> int:
    return len(re.findall(r"Worker finished execution", log.read_text(errors="replace")))


def test_two_workers_share_the_executions_and_stop_with_main(pg: str, tmp_path: Path) -> None:
    data = tmp_path / "n8n"
    h = start_queue(install(Settings().cache_dir), data, database_url=pg, workers=2)
    try:
        assert len(h.worker_pids) == 2 and all(alive(p) for p in h.worker_pids)
        assert asyncio.run(_calls(h, 24)) == list(range(24))  # each answer is its own call's
        jobs = [_jobs(data / f"n8n-worker-{i}.log") for i in range(2)]
        assert sum(jobs) >= 25 and min(jobs) > 0, jobs  # both workers ran executions
        assert not list(data.glob("database.sqlite")), "queue mode keeps n8n's data in PostgreSQL"
    finally:
        assert stop(data)
    assert not any(alive(p) for p in h.worker_pids)
    redis = read_pid(data / "redis.pid")
    assert redis is None or not alive(redis)
    again = start_queue(install(Settings().cache_dir), data, database_url=pg, workers=1)
    try:  # the same database: the workflow and the key survived the restart
        assert again.main.api_key == h.main.api_key
        assert asyncio.run(_calls(again, 2, deploy=False)) == [0, 1]
    finally:
        stop(data)
