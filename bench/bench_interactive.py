"""Benchmark: interactive execution on real n8n over loopback.

- preview of a 3-read plan (two CalDAV free/busy reads in parallel → overlap Code node);
- execute of a plan with one short write (CalDAV create_event): the whole execute (token
  redemption, staleness re-read, ledger, write, audit) and the write step alone;
- n8n executions/s (sequential webhook → Code → respond);
- parallel speed-up: two independent 300 ms reads run as two concurrent step executions vs. the
  same two reads as branches of one n8n workflow.

Run: ``.venv/bin/python bench/bench_interactive.py [--n 30]`` (starts its own n8n, Radicale,
PostgreSQL in temp folders; n8n is installed in the cache on first use).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from countersign.kernel import system_clock

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, summary

from countersign.approvals import Approvals
from countersign.execute import Executor
from countersign.kernel import Intent, Plan, Policy, Settings, source_registry_dir
from countersign.n8n import N8nClient, install, start, stop
from countersign.planner import make_plan
from countersign.preview import run_preview
from countersign.registry import load_registry
from countersign.sandbox import start_radicale
from countersign.signer import KeyRing, sign_plan
from countersign.steps import N8nTransport, StoreRecorder
from countersign.storage import Database, embedded_server


def _utc_text(t: datetime) -> str:
    return t.replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _now_utc() -> str:
    return _utc_text(datetime.now(UTC))


LOCAL = Policy(providers={"calendar": "caldav", "mail": "smtp", "chat": "slack"})
ALICE, BOB = "alice@example.com", "bob@example.com"
DURATION_MIN = 30  # the meeting length the bench's intents sign


class Slow(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        time.sleep(0.3)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: Any) -> None:
        pass


def wf(path: str, nodes: list[dict[str, Any]]) -> dict[str, Any]:
    trigger = {
        "id": f"t-{path}",
        "name": "Trigger",
        "type": "n8n-nodes-base.webhook",
        "typeVersion": 2,
        "position": [0, 0],
        "webhookId": f"w-{path}",
        "parameters": {
            "httpMethod": "POST",
            "path": path,
            "responseMode": "lastNode",
            "options": {},
        },
    }
    conns: dict[str, Any] = {
        "Trigger": {"main": [[{"node": n["name"], "type": "main", "index": 0} for n in nodes]]}
    }
    return {
        "name": f"bench {path}",
        "nodes": [trigger, *nodes],
        "connections": conns,
        "settings": {"executionOrder": "v1"},
    }


def get_node(name: str, url: str) -> dict[str, Any]:
    return {
        "id": name,
        "name": name,
        "type": "n8n-nodes-base.httpRequest",
        "typeVersion": 4.2,
        "position": [300, 0],
        "parameters": {"method": "GET", "url": url},
    }


async def main_async(n: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-interactive-"))
    cache = Path(os.environ.get("COUNTERSIGN_CACHE_DIR") or Settings().cache_dir)
    engine = os.environ.get("BENCH_N8N_EXPRESSION_ENGINE")
    # every server is stopped by this stack, in reverse order, whatever fails after it started
    # (before, a failure between starting Postgres and the `finally` left it running)
    stack = contextlib.ExitStack()
    try:  # every server started below is stopped, whatever fails
        stack.callback(shutil.rmtree, tmp, True)
        handle = start(
            install(cache),
            tmp / "n8n",
            extra_env={"N8N_EXPRESSION_ENGINE": engine} if engine else None,
        )
        stack.callback(stop, tmp / "n8n")
        radicale, rproc = start_radicale(tmp / "radicale")
        stack.callback(rproc.wait, 10)
        stack.callback(rproc.terminate)
        slow = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
        threading.Thread(target=slow.serve_forever, daemon=True).start()
        stack.callback(slow.shutdown)
        slow_url = f"http://127.0.0.1:{slow.server_address[1]}"
        db = Database.from_url(stack.enter_context(embedded_server(tmp / "pg")))
        stack.callback(db.dispose)
        registry = load_registry(source_registry_dir())
        ring = KeyRing.from_seed(os.urandom(32), pubkey_id="k1", created_at=time_now())
        settings = {"caldav_base_url": radicale.base_url, "smtp_from": "cs@example.com"}
        for u in (ALICE, BOB):
            radicale.make_calendar(u)
        rows: list[tuple[str, list[float]]] = []
        async with N8nClient(handle.base_url, handle.api_key) as client:
            transport = N8nTransport(client)
            recorder = StoreRecorder(db, clock=system_clock)
            executor = Executor(
                keys=ring, registry=registry, transport=transport, db=db, settings=settings
            )

            # n8n executions/s: webhook → Code → respond
            code = {
                "id": "c",
                "name": "Code",
                "type": "n8n-nodes-base.code",
                "typeVersion": 2,
                "position": [300, 0],
                "parameters": {
                    "mode": "runOnceForAllItems",
                    "language": "javaScript",
                    "jsCode": "return [{json: {ok: true}}];",
                },
            }
            created = await client.create_workflow(wf("bench-code", [code]))
            await client.activate(created["id"])
            await client.call_webhook("bench-code", {})
            lat = []
            t_all = time.perf_counter()
            for _ in range(3 * n):
                t0 = time.perf_counter()
                await client.call_webhook("bench-code", {})
                lat.append((time.perf_counter() - t0) * 1000)
            eps = 3 * n / (time.perf_counter() - t_all)
            rows.append(("n8n webhook → Code → respond (one execution)", lat))

            # parallel speed-up: two 300 ms reads
            for p in ("pa", "pb"):
                made = await client.create_workflow(
                    wf(f"bench-{p}", [get_node("Read", f"{slow_url}/{p}")])
                )
                await client.activate(made["id"])
            both = await client.create_workflow(
                wf(
                    "bench-both",
                    [
                        get_node("Read A", f"{slow_url}/a"),
                        {**get_node("Read B", f"{slow_url}/b"), "id": "b2"},
                    ],
                )
            )
            await client.activate(both["id"])
            await asyncio.gather(
                client.call_webhook("bench-pa", {}),
                client.call_webhook("bench-pb", {}),
                client.call_webhook("bench-both", {}),
            )
            par, one_wf = [], []
            for _ in range(max(5, n // 3)):
                t0 = time.perf_counter()
                await asyncio.gather(
                    client.call_webhook("bench-pa", {}), client.call_webhook("bench-pb", {})
                )
                par.append((time.perf_counter() - t0) * 1000)
                t0 = time.perf_counter()
                await client.call_webhook("bench-both", {})
                one_wf.append((time.perf_counter() - t0) * 1000)
            rows.append(("two 300 ms reads: two concurrent step executions", par))
            rows.append(("two 300 ms reads: two branches of one n8n workflow", one_wf))

            # preview and execute of fresh plans
            previews, executes, writes = [], [], []
            for i in range(n):
                intent = Intent.model_validate(
                    {
                        "intent": "find_meeting_time",
                        "intent_id": f"01JDQ3Z00000000000000{i:05d}",
                        "received_at": _now_utc(),  # a plan is valid for its TTL from here
                        "user_id": f"organizer{i}@example.com",
                        "entities": {
                            "participants": [ALICE, BOB],
                            "duration_min": DURATION_MIN,
                            "title": f"bench {i}",
                            "window_start": "2037-11-23T13:00:00Z",
                            "window_end": "2037-11-23T18:00:00Z",
                        },
                    }
                )
                radicale.make_calendar(
                    f"organizer{i}@example.com"
                )  # events land here; reads stay alike
                plan = make_plan(intent, [], registry, LOCAL)
                assert isinstance(plan, Plan)
                pid, key = ring.active()
                doc = sign_plan(plan, key=key, pubkey_id=pid, signer="planner@system").to_json()
                t0 = time.perf_counter()
                pv = await run_preview(
                    doc,
                    keys=ring,
                    registry=registry,
                    transport=transport,
                    recorder=recorder,
                    settings=settings,
                    actor=intent.user_id,
                    now=system_clock(),
                )
                previews.append((time.perf_counter() - t0) * 1000)
                steps: Any = pv.wrapper.normalized["steps"]
                slot = steps["3"]["slots"][-1]
                # the choice the card offers: a free stretch's start and the signed length (the
                # gate accepts exactly the intent's duration_min, not the stretch's whole range)
                begin = datetime.fromisoformat(slot["start"].replace("Z", "+00:00"))
                slot = {
                    "start": slot["start"],
                    "end": _utc_text(begin + timedelta(minutes=DURATION_MIN)),
                }
                token = (
                    Approvals(db, clock=system_clock)
                    .issue(
                        plan_id=plan.plan_id,
                        plan_hash=doc["plan_hash"],
                        gate_id="gate-A",
                        user_id=intent.user_id,
                        scopes=["calendar.write"],
                        ttl_s=300,
                        choice={"start": slot["start"], "end": slot["end"]},
                    )
                    .token
                )
                t0 = time.perf_counter()
                report = await executor.execute(
                    doc, user_id=intent.user_id, tokens={"gate-A": token}
                )
                executes.append((time.perf_counter() - t0) * 1000)
                assert report.status == "completed", report
                with db.tx() as c:
                    from sqlalchemy import text  # noqa: PLC0415

                    ms = c.execute(
                        text(
                            "SELECT latency_ms FROM audit_log WHERE plan_id = :p AND kind = 'step_finished'"
                        ),
                        {"p": plan.plan_id},
                    ).scalar_one()
                writes.append(float(ms))
            rows.append(("preview, 3-read plan (2 parallel CalDAV reads → overlap)", previews))
            rows.append(
                (
                    "execute, 1 write (redeem + staleness re-read of 3 steps + write + ledger + audit)",
                    executes,
                )
            )
            rows.append(("the write step alone (n8n CalDAV PUT, from the audit row)", writes))
    finally:
        stack.close()

    print(
        f"machine: {machine()}; n8n 2.41.1 on Node 24, expression engine {engine or 'default (vm)'}; loopback; n={n}\n"
    )
    print("| operation | median ms | p95 ms |")
    print("| --- | ---: | ---: |")
    for name, xs in rows:
        med, p95 = summary(xs)
        print(f"| {name} | {med:.1f} | {p95:.1f} |")
    par_med = summary(rows[1][1])[0]
    seq_med = summary(rows[2][1])[0]
    print(f"\nn8n executions/s (sequential calls): {eps:.1f}")
    print(
        f"parallel speed-up (one workflow / concurrent step executions): {seq_med / par_med:.2f}×"
    )


def time_now() -> datetime:
    return datetime.now(UTC)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=30)
    asyncio.run(main_async(ap.parse_args().n))
