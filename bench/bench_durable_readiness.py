"""Benchmark: the durable plan interpreter by readiness against whole waves (issue 16 item 4).

A plan of uneven branches, all durable reads on a loopback sandbox provider that answers each
search after a delay named by its consulate: ``a`` (1.0 s) ‖ (``b`` (0.2 s) → ``c`` (0.8 s)).
By waves, ``c`` waits for the whole first wave (``a``): ~1.0 + 0.8 s; by readiness it starts when
``b`` is done: ~max(1.0, 0.2 + 0.8) s. Both run as real ``PlanExecutionWorkflow`` runs on the dev
server: readiness is today's path (``one-scheduler-v1``); the wave loop is the same workflow's
pre-patch path (``_waves``, what histories recorded before the patch replay), reached through a
bench-only subclass registered under another name. Both run unsandboxed here (the same runner for
both, so the comparison is fair). Interleaved, ``--n`` runs each.

Run: ``.venv/bin/python bench/bench_durable_readiness.py [--n 10]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from temporalio import workflow
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, summary

from countersign.durable import DurableActivities, PlanExecutionWorkflow, PlanInput, connect
from countersign.durable.models import DoneWrite, PlanRunResult
from countersign.durable.runtime import temporal_start, temporal_stop
from countersign.kernel import Intent, Plan, PlanStep, Policy, source_registry_dir
from countersign.n8n import free_port
from countersign.planner import make_plan
from countersign.registry import load_registry
from countersign.signer import KeyRing, sign_plan
from countersign.storage import Database, embedded_server

DELAY_S = {"slowcity": 1.0, "bcity": 0.2, "ccity": 0.8}
LOCAL = Policy(providers={"calendar": "caldav", "mail": "smtp", "chat": "slack"})
TASK_QUEUE = "bench-readiness"


class Visa(BaseHTTPRequestHandler):
    """Sandbox visa search: answers after the delay its consulate names."""

    def do_GET(self) -> None:
        city = urlparse(self.path).path.split("/")[2]  # /consulates/<city>/slots
        time.sleep(DELAY_S.get(city, 0.0))
        raw = json.dumps({"slots": []}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: Any) -> None:
        pass


@workflow.defn(name="PlanExecutionWavesBench")
class WavesPlanWorkflow(PlanExecutionWorkflow):
    """Bench only: the interpreter's pre-``one-scheduler-v1`` path (whole waves)."""

    @workflow.run
    async def run(self, inp: PlanInput) -> PlanRunResult:
        return await super().run(inp)

    async def _schedule(
        self,
        inp: PlanInput,
        graph: dict[int, PlanStep],
        outputs: dict[str, Any],
        done_writes: list[DoneWrite],
    ) -> tuple[str | None, int | None]:
        return await self._waves(inp, graph, outputs, done_writes)


async def bench(n: int) -> list[str]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-readiness-"))
    port = free_port()
    temporal_start(tmp / "temporal", port=port, ui_port=free_port())
    ThreadingHTTPServer.request_queue_size = 256
    visa = ThreadingHTTPServer(("127.0.0.1", 0), Visa)
    threading.Thread(target=visa.serve_forever, daemon=True).start()
    stack = contextlib.ExitStack()
    try:
        db = Database.from_url(stack.enter_context(embedded_server(tmp / "pg")))
        stack.callback(db.dispose)
        registry = load_registry(source_registry_dir())
        ring = KeyRing.from_seed(os.urandom(32), pubkey_id="k1", created_at=datetime.now(UTC))
        acts = DurableActivities(
            db,
            keys=ring,
            registry=registry,
            settings={"visa_base_url": f"http://127.0.0.1:{visa.server_address[1]}"},
        )
        received = datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")

        def uneven(i: int) -> dict[str, Any]:
            intent = Intent.model_validate(
                {
                    "intent": "watch_visa_slots",
                    "intent_id": f"01JDQ3Z00000000000000{i:05d}",
                    "received_at": received,
                    "user_id": "alice@example.com",
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
            base = plan.model_dump(mode="json")
            read = base["graph"][0]
            graph = []
            for step, city, after in ((1, "slowcity", []), (2, "bcity", []), (3, "ccity", [2])):
                graph.append(
                    {
                        **read,
                        "step": step,
                        "after": after,
                        "args": {**read["args"], "consulate": city},
                    }
                )
            base["graph"] = graph
            base["plugins"] = ["visa.sandbox"]
            base["constraints"] = {**base["constraints"], "scopes": []}
            pid, key = ring.active()
            return sign_plan(
                Plan.model_validate(base), key=key, pubkey_id=pid, signer="planner@system"
            ).to_json()

        client = await connect(f"127.0.0.1:{port}")
        worker = Worker(
            client,
            task_queue=TASK_QUEUE,
            workflows=[PlanExecutionWorkflow, WavesPlanWorkflow],
            activities=[acts.verify_plan, acts.poll, acts.finish_plan, acts.compensate],
            activity_executor=ThreadPoolExecutor(8),
            workflow_runner=UnsandboxedWorkflowRunner(),
            max_concurrent_activities=8,
        )
        times: dict[str, list[float]] = {"readiness": [], "waves": []}
        async with worker:
            for i in range(n + 1):  # the first round warms up and is not counted
                for kind, wf in (
                    ("readiness", "PlanExecutionWorkflow"),
                    ("waves", "PlanExecutionWavesBench"),
                ):
                    d = uneven(i * 2 + (kind == "waves"))
                    t0 = time.perf_counter()
                    r = await client.execute_workflow(
                        wf,
                        PlanInput(signed=d, user_id="alice@example.com"),
                        id=f"{kind}-{d['plan']['plan_id']}",
                        task_queue=TASK_QUEUE,
                        result_type=PlanRunResult,
                    )
                    if r.status != "completed":
                        raise SystemExit(f"{kind}: {r}")
                    if i:
                        times[kind].append((time.perf_counter() - t0) * 1000)
        (rm, rp), (wm, wp) = summary(times["readiness"]), summary(times["waves"])
        return [
            f"| waves (pre-`one-scheduler-v1` path) | {wm:.0f} | {wp:.0f} | 1.00 |",
            f"| readiness (`run_dag`, today's path) | {rm:.0f} | {rp:.0f} | {rm / wm:.2f} |",
            "| ideal from the provider delays alone: waves 1800, readiness 1000 | | | 0.56 |",
        ]
    finally:
        temporal_stop(tmp / "temporal")
        visa.shutdown()
        stack.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10)
    a = ap.parse_args()
    lines = asyncio.run(bench(a.n))
    print(
        f"machine: {machine()}; Temporal dev server (SQLite file), worker in this process; "
        f"plan a(1.0 s) ‖ (b(0.2 s) → c(0.8 s)), all durable reads; n={a.n} each, interleaved\n"
    )
    print("| interpreter | run median ms | p95 ms | median / waves |\n| --- | ---: | ---: | ---: |")
    for line in lines:
        print(line)


if __name__ == "__main__":
    main()
