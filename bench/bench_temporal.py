"""Benchmark: durable watchers on the real Temporal dev server (SQLite, loopback).

- watchers started and completed per second (a one-poll watcher that ends `budget_exhausted`);
- worker memory and CPU holding N idle watchers (each waiting on a long poll timer);
- time from a gate approval (update accepted) to the booking write finished.

Run: ``.venv/bin/python bench/bench_temporal.py [--idle 1000] [--cache N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from countersign.kernel import system_clock

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, summary

from countersign.approvals import Approvals, token_hash
from countersign.durable import (
    ApproveGate,
    DurableActivities,
    PlanInput,
    WatcherWorkflow,
    WatchInput,
    connect,
    make_worker,
    start_plan,
    start_watcher,
)
from countersign.durable.runtime import temporal_start, temporal_stop
from countersign.kernel import Intent, Plan, Policy, source_registry_dir
from countersign.n8n import free_port
from countersign.planner import make_plan
from countersign.registry import load_registry
from countersign.signer import KeyRing, sign_plan
from countersign.storage import Database, embedded_server


def _now_utc() -> str:
    from datetime import UTC as _UTC  # noqa: PLC0415
    from datetime import datetime as _dt  # noqa: PLC0415

    return _dt.now(_UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


LOCAL = Policy(providers={"calendar": "caldav", "mail": "smtp", "chat": "slack"})
SLOTS = {"on": False}
SEARCHES = {"n": 0}
POSTS: list[float] = []  # perf_counter() when each booking request reached the provider
_LOCK = threading.Lock()


class Visa(BaseHTTPRequestHandler):
    def _send(self, body: Any) -> None:
        raw = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        with _LOCK:
            SEARCHES["n"] += 1
        self._send({"slots": [{"id": "s1"}] if SLOTS["on"] else []})

    def do_POST(self) -> None:
        POSTS.append(time.perf_counter())
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._send({"id": self.headers.get("Idempotency-Key", "")[-12:]})

    def log_message(self, *args: Any) -> None:
        pass


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def main_async(idle: int, cache: int) -> None:
    tmp = Path(tempfile.mkdtemp())
    port, ui = free_port(), free_port()
    temporal_start(tmp / "temporal", port=port, ui_port=ui)
    ThreadingHTTPServer.request_queue_size = 256  # 32 activity threads; the default 5 drops some
    visa = ThreadingHTTPServer(("127.0.0.1", 0), Visa)
    threading.Thread(target=visa.serve_forever, daemon=True).start()
    pg = contextlib.ExitStack()  # stops the throw-away server in the finally below
    db = Database.from_url(pg.enter_context(embedded_server(tmp / "pg")))
    registry = load_registry(source_registry_dir())
    ring = KeyRing.from_seed(os.urandom(32), pubkey_id="k1", created_at=datetime.now(UTC))
    acts = DurableActivities(
        db,
        keys=ring,
        registry=registry,
        settings={"visa_base_url": f"http://127.0.0.1:{visa.server_address[1]}"},
    )

    def doc(i: int) -> dict[str, Any]:
        intent = Intent.model_validate(
            {
                "intent": "watch_visa_slots",
                "intent_id": f"01JDQ3Z0000000000000{i:06d}",
                "received_at": _now_utc(),  # a plan is valid for its TTL from here
                "user_id": "alice@example.com",
                "entities": {
                    "consulate": "lisbon",
                    "date_from": "2027-03-01T00:00:00Z",
                    "date_to": "2027-03-31T00:00:00Z",
                },
            }
        )
        plan = make_plan(intent, [], registry, LOCAL)
        assert isinstance(plan, Plan)
        pid, key = ring.active()
        return sign_plan(plan, key=key, pubkey_id=pid, signer="planner@system").to_json()

    def trivial(i: int) -> dict[str, Any]:
        base = doc(50_000 + i)["plan"]
        base["graph"] = base["graph"][:1]
        base["plugins"] = ["visa.sandbox"]
        base["constraints"] = {**base["constraints"], "scopes": []}
        plan = Plan.model_validate(base)
        pid, key = ring.active()
        return sign_plan(plan, key=key, pubkey_id=pid, signer="planner@system").to_json()

    lines: list[str] = []
    try:
        client = await connect(f"127.0.0.1:{port}")
        async with make_worker(
            client, acts, max_concurrent_activities=32, max_cached_workflows=cache
        ):
            # 1. one-poll watchers started and completed per second
            n = 100
            docs = [doc(i) for i in range(n)]
            t0 = time.perf_counter()
            handles = await asyncio.gather(
                *(
                    start_watcher(
                        client,
                        WatchInput(
                            signed=d,
                            user_id="alice@example.com",
                            watch_step=1,
                            gate_id="gate-A",
                            book_step=3,
                            max_polls=1,
                        ),
                    )
                    for d in docs
                )
            )
            await asyncio.gather(*(h.result() for h in handles))
            wps = n / (time.perf_counter() - t0)
            lines.append(
                f"| one-poll watchers started and completed | {wps:.1f} /s (n={n}, each: verify + 1 poll) |"
            )

            print(f"one-poll watchers: {wps:.1f}/s", file=sys.stderr)
            # 1b. a trivial plan (one durable read) through PlanExecutionWorkflow
            tdocs = [trivial(i) for i in range(n)]
            t0 = time.perf_counter()
            handles = await asyncio.gather(
                *(
                    start_plan(client, PlanInput(signed=d, user_id="alice@example.com"))
                    for d in tdocs
                )
            )
            results = await asyncio.gather(*(h.result() for h in handles))
            assert all(r.status == "completed" for r in results)
            pps = n / (time.perf_counter() - t0)
            lines.append(
                f"| trivial plans (PlanExecutionWorkflow: verify + 1 read) started and completed | {pps:.1f} /s (n={n}) |"
            )

            print(f"trivial plans: {pps:.1f}/s", file=sys.stderr)
            # 2. approval → booking write
            SLOTS["on"] = True
            lat: list[float] = []
            to_write: list[float] = []
            for i in range(20):
                d = doc(1000 + i)
                h = await start_watcher(
                    client,
                    WatchInput(
                        signed=d,
                        user_id="alice@example.com",
                        watch_step=1,
                        gate_id="gate-A",
                        book_step=3,
                        poll_interval_s=1,
                    ),
                )
                while True:
                    st = await h.query(WatcherWorkflow.status)
                    if st is not None and st.status == "waiting_approval":
                        break
                    await asyncio.sleep(0.05)
                token = (
                    Approvals(db, clock=system_clock)
                    .issue(
                        plan_id=d["plan"]["plan_id"],
                        plan_hash=d["plan_hash"],
                        gate_id="gate-A",
                        user_id="alice@example.com",
                        scopes=["visa.book"],
                        ttl_s=300,
                        choice={"slot": {"id": "s1"}},
                    )
                    .token
                )
                # spent where it arrives (as the API does); the run is told its hash
                Approvals(db, clock=system_clock).redeem(
                    token,
                    plan_id=d["plan"]["plan_id"],
                    plan_hash=d["plan_hash"],
                    gate_id="gate-A",
                    user_id="alice@example.com",
                )
                posts = len(POSTS)
                t0 = time.perf_counter()
                await h.execute_update(
                    WatcherWorkflow.approve_gate,
                    ApproveGate(gate_id="gate-A", approval=token_hash(token)),
                )
                await h.result()
                lat.append((time.perf_counter() - t0) * 1000)
                to_write.append((POSTS[posts] - t0) * 1000)
            med, p95 = summary(to_write)
            lines.append(
                f"| gate approval sent → booking request at the provider | median {med:.0f} ms, p95 {p95:.0f} ms (n={len(to_write)}) |"
            )
            med, p95 = summary(lat)
            lines.append(
                f"| gate approval (update with token redemption) → booking written → run complete | median {med:.0f} ms, p95 {p95:.0f} ms |"
            )

            print(f"approval latency: {med:.0f} ms", file=sys.stderr)
            # 3. idle watchers
            SLOTS["on"] = False
            rss0, cpu0 = rss_mb(), resource.getrusage(resource.RUSAGE_SELF)
            target = SEARCHES["n"] + idle  # one first poll per idle watcher (counted from here)
            t0 = time.perf_counter()
            idle_docs = [doc(100_000 + i) for i in range(idle)]
            for chunk in range(0, idle, 200):
                await asyncio.gather(
                    *(
                        start_watcher(
                            client,
                            WatchInput(
                                signed=d,
                                user_id="alice@example.com",
                                watch_step=1,
                                gate_id="gate-A",
                                book_step=3,
                                poll_interval_s=86400,
                            ),
                        )
                        for d in idle_docs[chunk : chunk + 200]
                    )
                )
            start_s = time.perf_counter() - t0
            # every watcher finishes its first verify + poll, then waits on a 1-day timer
            last, stalled = SEARCHES["n"], 0
            while SEARCHES["n"] < target and stalled < 120:
                await asyncio.sleep(1)
                stalled = 0 if SEARCHES["n"] != last else stalled + 1
                last = SEARCHES["n"]
            polled = SEARCHES["n"] - target + idle
            print(f"idle watchers polled: {polled}/{idle}", file=sys.stderr)
            polled_s = time.perf_counter() - t0 - stalled
            await asyncio.sleep(10)
            rss1 = rss_mb()
            cpu_a = resource.getrusage(resource.RUSAGE_SELF)
            await asyncio.sleep(30)
            cpu_b = resource.getrusage(resource.RUSAGE_SELF)
            idle_cpu = (
                ((cpu_b.ru_utime + cpu_b.ru_stime) - (cpu_a.ru_utime + cpu_a.ru_stime)) / 30 * 100
            )
            lines.append(
                f"| {idle} idle watchers (each: first poll done, waiting on a 1-day timer; worker cache {cache} runs) | started in {start_s:.1f} s, {polled} first polls done after {polled_s:.0f} s; "
                f"worker RSS {rss0:.0f} → {rss1:.0f} MB (+{(rss1 - rss0) * 1024 / idle:.0f} KB each); "
                f"idle CPU {idle_cpu:.1f} % of one core |"
            )
            _ = cpu0
    finally:
        temporal_stop(tmp / "temporal")
        visa.shutdown()
        db.dispose()
        pg.close()
    print(f"machine: {machine()}; Temporal dev server 1.32 (SQLite), worker in this process\n")
    print("| measure | result |")
    print("| --- | --- |")
    for line in lines:
        print(line)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--idle", type=int, default=1000)
    ap.add_argument("--cache", type=int, default=0, help="worker workflow cache (default: --idle)")
    args = ap.parse_args()
    asyncio.run(main_async(args.idle, args.cache or max(1000, args.idle)))
