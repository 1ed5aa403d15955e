"""Benchmark: n8n's own part of a calendar write, setting by setting (issue 28 §2).

n8n's part is the step webhook call → the PUT arriving at the CalDAV server (Radicale with a
stopwatch at its door, ``caldav_arrivals.py``), the same clock as ``bench_approve_write.py``'s
"n8n: webhook call → first PUT arrives"; the answer back at the caller is reported too. The
workflow is the one WorkflowBuilder builds for the meeting's ``caldav.create_event`` step
(Webhook → HTTP Request), each call a fresh event (its own plan, so its own UID).

Settings measured, one at a time against the served configuration (SQLite with a pool of 2, task
runners on, expression engine ``vm`` — the isolated one, kept):
- per workflow (one n8n, copies of the workflow under other names and paths): what a write
  keeps — as built (``all``; no ``saveExecutionProgress`` since the registry marks the op
  ``probe``), ``all`` + progress (what every write had before), ``none`` (a reference only: the
  reconciler needs a write's record);
- per process (an n8n each, every one running the today's workflow): its database on the
  embedded PostgreSQL instead of SQLite (``DB_TYPE=postgresdb``, as queue mode runs it), SQLite
  with a pool of 4, task runners off (``N8N_RUNNERS_ENABLED=false``).

Rounds interleave every (process, workflow) pair, the order rotating each round; the machine is
shared, so compare ratios within one run. Run: ``.venv/bin/python
bench/bench_n8n_write_settings.py [--n 40] [--processes 1]`` (``--processes 1``: the served
process only, its workflows compared).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import os
import shutil
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).parent))
import caldav_arrivals
from common import machine, summary

from countersign.kernel import Intent, Plan, Policy, Settings, source_registry_dir
from countersign.n8n import N8nClient, install, start, stop
from countersign.n8n.queue import N8nDatabase
from countersign.planner import make_plan
from countersign.registry import load_registry
from countersign.sandbox import free_port
from countersign.steps import N8nStepRunner, N8nTransport
from countersign.storage import embedded_server
from countersign.workflowbuilder import StepWorkflow, build_workflow_for_step

LOCAL = Policy(providers={"calendar": "caldav", "mail": "smtp", "chat": "slack"})
ALICE, BOB = "alice@example.com", "bob@example.com"
DAY0 = datetime(2038, 1, 4, 9, tzinfo=UTC)
VM = {"N8N_EXPRESSION_ENGINE": "vm"}

WORKFLOWS: dict[str, dict[str, Any]] = {
    "as built (probed write: all, no progress)": {},
    "all + progress (before: every write)": {"saveExecutionProgress": True},
    "none (reference: no record)": {
        "saveDataSuccessExecution": "none",
        "saveDataErrorExecution": "none",
        "saveExecutionProgress": False,
    },
}


def _utc(t: datetime) -> str:
    return t.replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _plan(registry: Any, i: int) -> Plan:
    day = DAY0 + timedelta(days=i)
    intent = Intent.model_validate(
        {
            "intent": "schedule_meeting",
            "intent_id": f"01JDQ3Z0000000000000W{i:05d}",
            "received_at": _utc(datetime.now(UTC)),
            "user_id": "bench@example.com",
            "entities": {
                "participants": [ALICE, BOB],
                "duration_min": 30,
                "title": f"settings {i}",
                "window_start": _utc(day),
                "window_end": _utc(day + timedelta(hours=4)),
            },
        }
    )
    plan = make_plan(intent, [], registry, LOCAL)
    if not isinstance(plan, Plan):
        raise SystemExit(f"no plan: {plan}")
    return plan


def _variant(wf: StepWorkflow, label: str, settings: dict[str, Any]) -> StepWorkflow:
    w = copy.deepcopy(wf.workflow)
    tag = uuid.uuid5(uuid.NAMESPACE_URL, label).hex[:8]
    w["name"] = f"{w['name']} {tag}"
    w["settings"] = {**w["settings"], **settings}
    path = f"{wf.path}-{tag}"
    for node in w["nodes"]:
        if node["type"] == "n8n-nodes-base.webhook":
            node["parameters"]["path"] = path
            node["webhookId"] = str(uuid.uuid4())
    return StepWorkflow(step=wf.step, path=path, workflow=w)


class Target:
    """One (n8n process, workflow) pair and its samples."""

    def __init__(self, label: str, transport: N8nTransport, wf: StepWorkflow) -> None:
        self.label = label
        self.transport = transport
        self.wf = wf
        self.arrive: list[float] = []
        self.answer: list[float] = []


async def main_async(n: int, processes_wanted: int = 4) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-n8n-settings-"))
    cache = Path(os.environ.get("COUNTERSIGN_CACHE_DIR") or Settings().cache_dir)
    registry = load_registry(source_registry_dir())
    inst = install(cache)
    stack = contextlib.ExitStack()
    targets: list[Target] = []
    try:
        stack.callback(shutil.rmtree, tmp, True)
        arrivals = stack.enter_context(caldav_arrivals.start(tmp / "radicale", free_port()))
        url = stack.enter_context(embedded_server(tmp / "pg"))
        n8n_db = N8nDatabase.from_url(url)
        n8n_db.ensure()
        base = arrivals.base_url
        for u in (ALICE, BOB):
            httpx.request("MKCOL", f"{base}/{u}/", timeout=10)
            httpx.request("MKCALENDAR", f"{base}/{u}/calendar/", timeout=10)
        processes: dict[str, dict[str, str]] = {
            "SQLite pool 2, runners on (today)": VM,
            "n8n's database on PostgreSQL": {**VM, **n8n_db.env()},
            "SQLite pool 4": {**VM, "DB_SQLITE_POOL_SIZE": "4"},
            "task runners off": {**VM, "N8N_RUNNERS_ENABLED": "false"},
        }
        processes = dict(list(processes.items())[:processes_wanted])
        settings = {"caldav_base_url": base, "smtp_from": "cs@example.com"}
        plan0 = _plan(registry, 0)
        wf0 = build_workflow_for_step(plan0, "0" * 64, plan0.step(5), registry)
        async with contextlib.AsyncExitStack() as astack:
            for k, (pname, env) in enumerate(processes.items()):
                folder = tmp / f"n8n{k}"
                try:
                    handle = start(inst, folder, extra_env=env)
                except Exception as e:
                    print(f"{pname}: n8n did not start ({str(e)[:200]})")
                    continue
                stack.callback(stop, folder)
                client = await astack.enter_async_context(
                    N8nClient(handle.base_url, handle.api_key)
                )
                transport = N8nTransport(client)
                first = next(iter(WORKFLOWS))
                wfs = WORKFLOWS if k == 0 else {first: WORKFLOWS[first]}
                for wname, ws in wfs.items():
                    wf = _variant(wf0, f"{pname}/{wname}", ws)
                    await transport.deploy(wf)
                    targets.append(Target(f"{pname} · {wname}", transport, wf))

            async def call(t: Target, i: int, keep: bool) -> None:
                plan = _plan(registry, i)
                day = DAY0 + timedelta(days=i)
                choice = {"start": _utc(day), "end": _utc(day + timedelta(minutes=30))}
                runner = N8nStepRunner(
                    plan=plan,
                    plan_hash="0" * 64,
                    registry=registry,
                    transport=t.transport,
                    settings=settings,
                    choices={"gate-A": choice},
                    _paths={("caldav", "create_event"): t.wf.path},
                )
                prepared = await runner.prepare(plan.step(5), {}, idempotency_key=f"{i}:5:x")
                arrivals.take()
                t0 = time.perf_counter()
                item = await t.transport.call(t.wf.path, prepared.body, write=True)
                t1 = time.perf_counter()
                if item.get("statusCode") != 201:
                    raise SystemExit(f"{t.label}: {item}")
                puts = [a for a, _ in arrivals.take() if a >= t0]
                if keep:
                    t.arrive.append((min(puts) - t0) * 1000)
                    t.answer.append((t1 - t0) * 1000)

            i = 0
            for _ in range(3):  # warm every pair
                for t in targets:
                    i += 1
                    await call(t, i, False)
            for r in range(n):
                order = targets[r % len(targets) :] + targets[: r % len(targets)]
                for t in order:
                    i += 1
                    await call(t, i, True)
    finally:
        stack.close()
    print(
        f"machine: {machine()}; load {os.getloadavg()[0]:.1f}; n8n 2.41.1 on Node 24, "
        f"expression engine vm; n={n} interleaved rounds; shared machine: compare ratios\n"
    )
    print(
        "| n8n process · write workflow | webhook call → PUT arrives: median / p95 ms | "
        "ratio to today (median) | call → answer back: median / p95 ms |"
    )
    print("| --- | ---: | ---: | ---: |")
    ref = summary(targets[0].arrive)[0]
    for t in targets:
        (am, ap), (bm, bp) = summary(t.arrive), summary(t.answer)
        print(f"| {t.label} | {am:.1f} / {ap:.1f} | {am / ref:.2f} | {bm:.1f} / {bp:.1f} |")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--processes", type=int, default=4)
    a = ap.parse_args()
    asyncio.run(main_async(a.n, a.processes))
