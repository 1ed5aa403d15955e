"""Benchmark: one-poll durable runs per second end to end, and CPU per run (issue 28 §4).

The run measured is the one-poll watcher of ``bench_watchers_scale.py`` (verify + one poll of a
loopback visa provider + budget end + finish), started ``--burst`` at once on one real dev server
(``temporal server start-dev``, SQLite file), one embedded PostgreSQL and one worker process.
Variants, each in its own worker process, interleaved round by round on the same server:

- ``old``: verify_plan / finish_plan as activity tasks — the path histories recorded before
  ``local-verify-finish-v1`` replay (the worker forces ``workflow_steps.local_activities`` false);
- ``new``: today's path (local activities);
- ``new+<k>=<v>``: today's path with a worker setting changed (``cache``, ``activities``,
  ``wf-tasks``, ``wf-polls``, ``act-polls``), e.g. ``new+wf-polls=2``.

Per round: runs completed per second (first start → last result), each run's start → result
latency (median, p95), and CPU ms per run of the dev server, the worker and PostgreSQL (from
/proc), with the load average.

Run: ``.venv/bin/python bench/bench_durable_cpu.py --burst 300 --rounds 2 --variants old,new``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import bench_watchers_scale as bws
from common import machine, pct

from countersign.durable import WatchInput, connect, start_watcher, workflow_steps
from countersign.durable.codec import payload_codec
from countersign.durable.runtime import temporal_start, temporal_stop
from countersign.kernel import Intent, Plan, source_registry_dir
from countersign.n8n import free_port
from countersign.planner import make_plan
from countersign.registry import load_registry
from countersign.signer import KeyRing, sign_plan
from countersign.storage import embedded_server

SETTINGS = ("cache", "activities", "wf-tasks", "wf-polls", "act-polls")


def worker_main(a: argparse.Namespace) -> None:
    """The worker process; ``--old-path`` takes the pre-``local-verify-finish-v1`` path."""
    if a.old_path:
        workflow_steps.local_activities = lambda: False
    bws.worker_main(a)


def _variant(name: str) -> tuple[str, dict[str, int]]:
    """``old`` / ``new`` / ``new+k=v+k=v``: (path, worker settings)."""
    head, *sets = name.split("+")
    if head not in {"old", "new"}:
        raise SystemExit(f"unknown variant {name!r}")
    tuning = {}
    for kv in sets:
        k, _, v = kv.partition("=")
        if k not in SETTINGS:
            raise SystemExit(f"unknown setting {k!r} (one of {SETTINGS})")
        tuning[k] = int(v)
    return head, tuning


async def bench(a: argparse.Namespace) -> list[str]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-durable-cpu-"))
    port, ui = free_port(), free_port()
    temporal_start(tmp / "temporal", port=port, ui_port=ui)
    server = bws._tree(int((tmp / "temporal" / "temporal.pid").read_text().split()[0]))
    ThreadingHTTPServer.request_queue_size = 1024
    visa = ThreadingHTTPServer(("127.0.0.1", 0), bws.Visa)
    threading.Thread(target=visa.serve_forever, daemon=True).start()
    stack = contextlib.ExitStack()
    url = stack.enter_context(embedded_server(tmp / "pg"))
    postmaster = int((tmp / "pg" / "postmaster.pid").read_text().split()[0])
    seed, key_time = os.urandom(32), datetime.now(UTC)
    ring = KeyRing.from_seed(seed, pubkey_id="k1", created_at=key_time)
    registry = load_registry(source_registry_dir())
    keys = tmp / "keys"
    keys.mkdir(mode=0o700)
    codec = payload_codec(keys)
    received = datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    counter = iter(range(1, 10_000_000))

    def signed() -> dict[str, Any]:
        intent = Intent.model_validate(
            {
                "intent": "watch_visa_slots",
                "intent_id": f"01JDQ3Z0000000000000{next(counter):06d}",
                "received_at": received,
                "user_id": bws.USER,
                "entities": {
                    "consulate": "lisbon",
                    "date_from": "2027-03-01T00:00:00Z",
                    "date_to": "2027-03-31T00:00:00Z",
                },
            }
        )
        plan = make_plan(intent, [], registry, bws.LOCAL)
        if not isinstance(plan, Plan):
            raise SystemExit(f"the planner asked for more: {plan}")
        pid, key = ring.active()
        return sign_plan(plan, key=key, pubkey_id=pid, signer="planner@system").to_json()

    def start_worker(path: str, tuning: dict[str, int]) -> subprocess.Popen[str]:
        cmd = [
            sys.executable,
            __file__,
            "--worker-mode",
            f"--address=127.0.0.1:{port}",
            f"--db-url={url}",
            f"--seed={base64.b64encode(seed).decode()}",
            f"--key-time={key_time.isoformat()}",
            f"--visa-url=http://127.0.0.1:{visa.server_address[1]}",
            f"--keys={keys}",
            *([f"--{k}={v}" for k, v in tuning.items()]),
            *(["--old-path"] if path == "old" else []),
        ]
        w = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        if w.stdout is None or "ready" not in w.stdout.readline():
            raise SystemExit("the worker did not start")
        return w

    rows: list[str] = []
    results: dict[str, list[dict[str, float]]] = {}
    try:
        client = await connect(f"127.0.0.1:{port}", codec=codec)
        variants = a.variants.split(",")
        for rnd in range(a.rounds + 1):  # round 0 warms the server and Postgres up, not reported
            for name in variants:
                path, tuning = _variant(name)
                worker = start_worker(path, tuning)
                try:
                    docs = [signed() for _ in range(a.burst if rnd else 50)]
                    await asyncio.sleep(1)
                    procs = {"server": server, "worker": [worker.pid]}
                    c0 = {k: bws._cpu(v) for k, v in procs.items()}
                    c0["postgres"] = bws._cpu(bws._tree(postmaster))
                    lat: list[float] = []

                    async def one(d: dict[str, Any], lat: list[float] = lat) -> str:
                        t = time.perf_counter()
                        inp = WatchInput(
                            signed=d,
                            user_id=bws.USER,
                            watch_step=1,
                            gate_id="gate-A",
                            book_step=3,
                            max_polls=1,
                        )
                        h = await start_watcher(client, inp)
                        r = await h.result()
                        lat.append((time.perf_counter() - t) * 1000)
                        return str(r.status)

                    t0 = time.perf_counter()
                    got = await asyncio.gather(*(one(d) for d in docs))
                    total = time.perf_counter() - t0
                    c1 = {k: bws._cpu(v) for k, v in procs.items()}
                    c1["postgres"] = bws._cpu(bws._tree(postmaster))
                    if set(got) != {"budget_exhausted"}:
                        raise SystemExit(f"{name}: unexpected endings {set(got)}")
                finally:
                    worker.send_signal(signal.SIGTERM)
                    try:
                        worker.wait(30)
                    except subprocess.TimeoutExpired:
                        worker.kill()
                if not rnd:
                    continue
                n = len(docs)
                cpu = {k: (c1[k] - c0[k]) * 1000 / n for k in c1}
                r = {
                    "rate": n / total,
                    "median": statistics.median(lat),
                    "p95": pct(lat, 0.95),
                    "cpu": sum(cpu.values()),
                    **{f"cpu_{k}": v for k, v in cpu.items()},
                    "load": os.getloadavg()[0],
                }
                results.setdefault(name, []).append(r)
                line = (
                    f"| {rnd} | {name} | {r['rate']:.1f} /s | {r['median']:.0f} ms | "
                    f"{r['p95']:.0f} ms | {r['cpu']:.1f} ms (server {cpu['server']:.1f}, worker "
                    f"{cpu['worker']:.1f}, postgres {cpu['postgres']:.1f}) | {r['load']:.1f} |"
                )
                rows.append(line)
                print(line, file=sys.stderr, flush=True)
    finally:
        temporal_stop(tmp / "temporal")
        visa.shutdown()
        stack.close()
        shutil.rmtree(tmp, ignore_errors=True)
    rows.append("")
    rows.append("| variant | runs/s (median of rounds) | CPU ms per run (median) | × old runs/s |")
    rows.append("| --- | ---: | ---: | ---: |")
    base = statistics.median(r["rate"] for r in results.get("old", [{"rate": float("nan")}]))
    for name, rs in results.items():
        rate = statistics.median(r["rate"] for r in rs)
        cpu_ms = statistics.median(r["cpu"] for r in rs)
        rows.append(f"| {name} | {rate:.1f} | {cpu_ms:.1f} | {rate / base:.2f} |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--burst", type=int, default=300, help="one-poll runs started at once")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds per variant")
    ap.add_argument("--variants", default="old,new")
    ap.add_argument("--worker-mode", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--old-path", action="store_true", help=argparse.SUPPRESS)
    for flag in ("address", "db-url", "seed", "key-time", "visa-url", "keys"):
        ap.add_argument(f"--{flag}", default="", help=argparse.SUPPRESS)
    for flag in SETTINGS:
        ap.add_argument(f"--{flag}", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker_mode:
        worker_main(a)
        return
    rows = asyncio.run(bench(a))
    print(f"machine: {machine()}; burst {a.burst}, {a.rounds} rounds after a warm-up\n")
    print("| round | variant | runs/s end to end | run median | run p95 | CPU per run | load |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
