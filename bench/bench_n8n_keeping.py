"""Benchmark: what n8n keeps, and what keeping it costs (issue 27 §6; N8nRuntime SPEC "What n8n
keeps").

One fresh n8n (pinned, SQLite, one process). Three copies of the same Webhook → Code → Code
workflow, differing only in their save settings — a read's (``none``), a write's before issue 27
§6 (``all``), a write's now (``all`` + ``saveExecutionProgress``) — called in interleaved rounds,
sequentially: latency per call (p50 / p95), executions kept, the database's growth. Then the
forget's redaction of one kept record: ``redact_flatted`` CPU time and ``SqliteExecutionStore``
wall time. Run: ``.venv/bin/python bench/bench_n8n_keeping.py [--n 40]``.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, summary

from countersign.kernel import Settings
from countersign.n8n import N8nClient, install, start, stop
from countersign.n8n.keeping import SqliteExecutionStore, mention_pattern, redact_flatted

MODES: dict[str, dict[str, Any]] = {
    "read (none)": {"saveDataSuccessExecution": "none", "saveDataErrorExecution": "none"},
    "write before (all)": {"saveDataSuccessExecution": "all", "saveDataErrorExecution": "all"},
    "write now (all + progress)": {
        "saveDataSuccessExecution": "all",
        "saveDataErrorExecution": "all",
        "saveExecutionProgress": True,
    },
}
JS = "return $input.all().map((i) => ({json: {...i.json.body, seen: true}}));"


def _workflow(n: int, settings: dict[str, Any]) -> dict[str, Any]:
    def code(name: str, x: int) -> dict[str, Any]:
        return {
            "id": f"{name}{n}",
            "name": name,
            "type": "n8n-nodes-base.code",
            "typeVersion": 2,
            "position": [x, 0],
            "parameters": {"mode": "runOnceForAllItems", "language": "javaScript", "jsCode": JS},
        }

    return {
        "name": f"bench keeping {n}",
        "nodes": [
            {
                "id": f"t{n}",
                "name": "Trigger",
                "type": "n8n-nodes-base.webhook",
                "typeVersion": 2,
                "position": [0, 0],
                "webhookId": f"bench-keep-{n}",
                "parameters": {
                    "httpMethod": "POST",
                    "path": f"bench-keep-{n}",
                    "responseMode": "lastNode",
                    "options": {},
                },
            },
            code("A", 200),
            code("B", 400),
        ],
        "connections": {
            "Trigger": {"main": [[{"node": "A", "type": "main", "index": 0}]]},
            "A": {"main": [[{"node": "B", "type": "main", "index": 0}]]},
        },
        "settings": {"executionOrder": "v1", **settings},
    }


BODY = {
    "plan": {"plan_id": "01BENCH", "step": 5},
    "args": {"attendees": ["alice@example.com", "bob@example.com"], "title": "Sync " * 20},
    "data": {"events": [{"summary": f"event {i}", "uid": f"u{i}"} for i in range(30)]},
}


async def run(base: str, key: str, db: Path, n: int) -> None:
    async with N8nClient(base, key) as c:
        ids = {}
        for i, (mode, settings) in enumerate(MODES.items()):
            wf = await c.create_workflow(_workflow(i, settings))
            await c.activate(wf["id"])
            ids[mode] = (i, str(wf["id"]))
        for _mode, (i, _) in ids.items():  # warm up (webhook registration is asynchronous)
            for _ in range(40):
                try:
                    await c.call_webhook(f"bench-keep-{i}", BODY)
                    break
                except Exception:
                    await asyncio.sleep(0.25)
        times: dict[str, list[float]] = {m: [] for m in MODES}
        size0 = db.stat().st_size + (db.with_name(db.name + "-wal").stat().st_size)
        for _ in range(n):
            for mode, (i, _) in ids.items():
                t = time.perf_counter()
                await c.call_webhook(f"bench-keep-{i}", BODY)
                times[mode].append((time.perf_counter() - t) * 1000)
        size1 = db.stat().st_size + (db.with_name(db.name + "-wal").stat().st_size)
        print(f"{machine()}; {n} sequential calls per mode, interleaved")
        print("| settings | p50 ms | p95 ms | executions kept |")
        print("| --- | --- | --- | --- |")
        for mode, (_, wid) in ids.items():
            kept = await c.list_executions(workflow_id=wid, limit=250)
            p50, p95 = summary(times[mode])
            print(f"| {mode} | {p50:.1f} | {p95:.1f} | {len(kept)} |")
        print(f"database + WAL growth over the run: {(size1 - size0) / 1024:.0f} KiB")
        kept = await c.list_executions(workflow_id=ids["write now (all + progress)"][1], limit=1)
        eid = str(kept[0]["id"])
    with sqlite3.connect(db) as con:
        text = con.execute(
            'SELECT data FROM execution_data WHERE "executionId" = ?', (int(eid),)
        ).fetchone()[0]
    pattern = mention_pattern(["bob@example.com", "01BENCH"])
    assert pattern is not None
    t = time.perf_counter()
    for _ in range(200):
        redact_flatted(text, pattern)
    cpu = (time.perf_counter() - t) / 200 * 1000
    store = SqliteExecutionStore(db)
    t = time.perf_counter()
    store.redact(eid, pattern)
    wall = (time.perf_counter() - t) * 1000
    print(
        f"redaction of one kept record ({len(text)} bytes): {cpu:.2f} ms CPU, {wall:.1f} ms in SQLite"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=40)
    args = ap.parse_args()
    data = Path(tempfile.mkdtemp(prefix="bench-keeping-"))
    handle = start(install(Settings().cache_dir), data)
    try:
        asyncio.run(run(handle.base_url, handle.api_key, data / ".n8n" / "database.sqlite", args.n))
    finally:
        stop(data)


if __name__ == "__main__":
    main()
