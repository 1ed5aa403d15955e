"""Benchmark: one-poll durable runs per second end to end, and CPU per run (issue 28 §4).

The run measured is the one-poll watcher of ``bench_watchers_scale.py`` (verify + one poll of a
loopback visa provider + budget end + finish), started ``--burst`` at once on one real dev server
(``temporal server start-dev``, SQLite file), one embedded PostgreSQL and one worker process.
Variants, each in its own worker process, interleaved round by round on the same server:

- ``old``: verify_plan / finish_plan as activity tasks — the path histories recorded before
  ``local-verify-finish-v1`` replay (the worker forces ``workflow_steps.local_activities`` false);
- ``new``: today's path (local activities);
- ``new+<k>=<v>``: today's path with a worker setting changed (``cache``, ``activities``,
  ``wf-tasks``, ``wf-polls``, ``act-polls``), e.g. ``new+wf-polls=2``, or a switch: ``stock=1``
  (the payload codec before its shallow per-run copy), ``unsandboxed=1`` (temporalio's
  UnsandboxedWorkflowRunner: measured, not the product's), ``gogc=<n>`` (the dev server's Go GC
  target; one dev server per value, rounds still interleaved).

Per round: runs completed per second (first start → last result), each run's start → result
latency (median, p95), and CPU ms per run of the dev server, the worker and PostgreSQL (from
/proc), the worker's split by thread, with the load average.

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
#: variant switches that are not ``make_worker`` settings: ``stock=1`` the payload codec as before
#: (new AESGCM ciphers for every serialization context),
#: ``unsandboxed=1`` temporalio's UnsandboxedWorkflowRunner (measured only: not the product's),
#: ``gogc=<n>`` the dev server's Go GC target (one server per value)
SWITCHES = ("stock", "unsandboxed", "gogc")


def _stock_codec() -> None:
    """The codec as it was before: a new ``EncryptionCodec`` (its AESGCM ciphers built again)
    for every serialization context the SDK asks for."""
    from temporalio.converter import (  # noqa: PLC0415
        ActivitySerializationContext,
        SerializationContext,
        WorkflowSerializationContext,
    )

    from countersign.durable.codec import EncryptionCodec  # noqa: PLC0415

    def with_context(self: EncryptionCodec, context: SerializationContext) -> EncryptionCodec:
        wid = None
        if isinstance(context, WorkflowSerializationContext | ActivitySerializationContext):
            wid = context.workflow_id
        if wid == self._workflow_id:
            return self
        return EncryptionCodec(self._keys, workflow_id=wid)

    EncryptionCodec.with_context = with_context  # type: ignore[method-assign,assignment]


def _unsandboxed() -> None:
    from temporalio.worker import UnsandboxedWorkflowRunner  # noqa: PLC0415

    from countersign.durable import worker  # noqa: PLC0415

    worker.workflow_runner = UnsandboxedWorkflowRunner  # type: ignore[assignment]


def worker_main(a: argparse.Namespace) -> None:
    """The worker process; ``--old-path`` takes the pre-``local-verify-finish-v1`` path."""
    if a.old_path:
        workflow_steps.local_activities = lambda: False
    if a.stock:
        _stock_codec()
    if a.unsandboxed:
        _unsandboxed()
    bws.worker_main(a)


def _thread_ticks(pid: int) -> dict[int, tuple[str, int]]:
    """Each thread of ``pid``: its name and CPU ticks (user + system)."""
    out = {}
    for t in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            st = (t / "stat").read_text()
            f = st[st.rindex(")") + 2 :].split()
            out[int(t.name)] = (st[st.index("(") + 1 : st.rindex(")")], int(f[11]) + int(f[12]))
    return out


def _threads(
    pid: int, t0: dict[int, tuple[str, int]], t1: dict[int, tuple[str, int]], n: int
) -> str:
    """CPU ms per run of the worker's main thread (the asyncio loop: decoding activations and
    encoding completions payload by payload, the codec, dispatch), its other Python threads (the
    SDK's workflow-task executor running the sandboxed workflow code; the activity pool) and
    Core's tokio threads."""
    ms = {"main": 0.0, "threads": 0.0, "tokio": 0.0}
    for tid, (name, ticks) in t1.items():
        part = "main" if tid == pid else "tokio" if name.startswith("tokio") else "threads"
        ms[part] += (ticks - t0.get(tid, (name, 0))[1]) * 1000 / bws._TICK / n
    return f"main {ms['main']:.1f}, threads {ms['threads']:.1f}, tokio {ms['tokio']:.1f}"


def _variant(name: str) -> tuple[str, dict[str, int], dict[str, int]]:
    """``old`` / ``new`` / ``new+k=v+k=v``: (path, worker settings, switches)."""
    head, *sets = name.split("+")
    if head not in {"old", "new"}:
        raise SystemExit(f"unknown variant {name!r}")
    tuning: dict[str, int] = {}
    switches: dict[str, int] = {}
    for kv in sets:
        k, _, v = kv.partition("=")
        if k not in SETTINGS + SWITCHES:
            raise SystemExit(f"unknown setting {k!r} (one of {SETTINGS + SWITCHES})")
        (switches if k in SWITCHES else tuning)[k] = int(v)
    return head, tuning, switches


async def bench(a: argparse.Namespace) -> list[str]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-durable-cpu-"))
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

    servers: dict[int, tuple[int, list[int], Any]] = {}  # gogc (0: Go's default) → server

    async def server_for(gogc: int) -> tuple[int, list[int], Any]:
        """The dev server of this GOGC (started on first use): port, process tree, client."""
        if gogc not in servers:
            port, ui, folder = free_port(), free_port(), tmp / f"temporal-{gogc}"
            temporal_start(folder, port=port, ui_port=ui, env={"GOGC": str(gogc)} if gogc else None)
            tree = bws._tree(int((folder / "temporal.pid").read_text().split()[0]))
            servers[gogc] = (port, tree, await connect(f"127.0.0.1:{port}", codec=codec))
        return servers[gogc]

    def start_worker(
        port: int, path: str, tuning: dict[str, int], switches: dict[str, int]
    ) -> subprocess.Popen[str]:
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
            *(["--stock"] if switches.get("stock") else []),
            *(["--unsandboxed"] if switches.get("unsandboxed") else []),
        ]
        w = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        if w.stdout is None or "ready" not in w.stdout.readline():
            raise SystemExit("the worker did not start")
        return w

    rows: list[str] = []
    results: dict[str, list[dict[str, float]]] = {}
    try:
        variants = a.variants.split(",")
        for rnd in range(a.rounds + 1):  # round 0 warms the server and Postgres up, not reported
            for name in variants:
                path, tuning, switches = _variant(name)
                port, server, client = await server_for(switches.get("gogc", 0))
                worker = start_worker(port, path, tuning, switches)
                try:
                    docs = [signed() for _ in range(a.burst if rnd else 50)]
                    await asyncio.sleep(1)
                    procs = {"server": server, "worker": [worker.pid]}
                    c0 = {k: bws._cpu(v) for k, v in procs.items()}
                    c0["postgres"] = bws._cpu(bws._tree(postmaster))
                    th0 = _thread_ticks(worker.pid)
                    lat: list[float] = []

                    async def one(
                        d: dict[str, Any], lat: list[float] = lat, client: Any = client
                    ) -> str:
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
                    th1 = _thread_ticks(worker.pid)
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
                    f"{cpu['worker']:.1f}, postgres {cpu['postgres']:.1f}) | "
                    f"{_threads(worker.pid, th0, th1, n)} | {r['load']:.1f} |"
                )
                rows.append(line)
                print(line, file=sys.stderr, flush=True)
    finally:
        for gogc in servers:
            temporal_stop(tmp / f"temporal-{gogc}")
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
    ap.add_argument("--stock", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--unsandboxed", action="store_true", help=argparse.SUPPRESS)
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
    print(
        "| round | variant | runs/s end to end | run median | run p95 | CPU per run | "
        "worker CPU per run by thread | load |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
