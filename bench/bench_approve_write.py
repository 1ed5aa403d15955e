"""Benchmark: approve → first calendar write, Countersign vs LangGraph + PostgresSaver (issue 16.0).

One process, one embedded PostgreSQL, one Radicale (the sandbox CalDAV server), one n8n; the same
PUT (``ics_event`` body, ``If-None-Match: *``) to the same server. Rounds interleave the two
systems (the order flips every round).

- Countersign: a fresh find_meeting_time plan per round is signed and previewed (untimed, and the
  preview is timed on its own: the 3-read plan, issue 16.1); then the clock starts, the person
  approves gate-A (``Approvals.issue``) and the plan is executed; the clock stops when the first
  write's answer is back at the executor (the step webhook call returns). The split comes from
  timestamps around the executor's phases: approve (token issue), verify + redeem + plan state,
  staleness re-check, claim (ledger + audit) before the send, the write through n8n.
- LangGraph 1.2 (bench-only extra ``bench``): a two-node graph, ``interrupt()`` then a node that
  PUTs the event with httpx (one keep-alive client), compiled with ``PostgresSaver`` on the same
  Postgres; the graph is run up to the interrupt untimed, then the clock starts and
  ``invoke(Command(resume=slot))`` runs; it stops when the PUT's answer is back in the node.
- Radicale's own time: a direct GET of a calendar collection and a direct PUT of one event (httpx,
  keep-alive), the floor under both.

"First write arrives" is measured as "the first write's answer is back at the writer" for both
systems (the server's own PUT time is in both, and is reported separately).

Run: ``.venv/bin/python bench/bench_approve_write.py [--n 80]`` (needs ``pip install -e '.[bench]'``;
starts its own n8n, Radicale and PostgreSQL in a temp folder and stops all three).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypedDict

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, summary

from countersign.approvals import Approvals
from countersign.binding import ics_event
from countersign.execute import Executor, stale_changes
from countersign.kernel import Intent, Plan, Policy, Settings, source_registry_dir, system_clock
from countersign.n8n import N8nClient, install, start, stop
from countersign.planner import make_plan
from countersign.preview import run_preview
from countersign.registry import load_registry
from countersign.sandbox import start_radicale
from countersign.signer import KeyRing, sign_plan
from countersign.steps import N8nStepRunner, N8nTransport, StoreRecorder, run_dag
from countersign.storage import Database, embedded_server

LOCAL = Policy(providers={"calendar": "caldav", "mail": "smtp", "chat": "slack"})
ALICE, BOB = "alice@example.com", "bob@example.com"


def _utc_text(t: datetime) -> str:
    return t.replace(microsecond=0).isoformat().replace("+00:00", "Z")


class Marks:
    """Timestamps (perf_counter, seconds) of one Countersign round."""

    def __init__(self) -> None:
        self.t: dict[str, float] = {}
        self.reads: list[tuple[float, float]] = []

    def mark(self, name: str) -> None:
        self.t.setdefault(name, time.perf_counter())


class TimedTransport:
    """The n8n transport with the first write's send and answer stamped."""

    def __init__(self, inner: N8nTransport) -> None:
        self.inner = inner
        self.marks = Marks()

    async def deploy(self, workflow: Any) -> None:
        await self.inner.deploy(workflow)

    async def call(
        self, path: str, body: Mapping[str, Any], *, write: bool = False
    ) -> Mapping[str, Any]:
        t0 = time.perf_counter()
        if write:
            self.marks.mark("write_sent")
        out = await self.inner.call(path, body, write=write)
        if write:
            self.marks.mark("write_answered")
        else:
            self.marks.reads.append((t0, time.perf_counter()))
        return out

    async def call_batch(self, path: str, body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        t0 = time.perf_counter()
        out = await self.inner.call_batch(path, body)
        self.marks.reads.append((t0, time.perf_counter()))
        return out


async def check_as_before(
    plan: Plan,
    runner: N8nStepRunner,
    reads: list[int],
    prints: Mapping[int, str],
    before: Mapping[int, Any],
    user_id: str,
) -> dict[int, Any]:
    """The staleness re-check as it was before issue 16.0 (every read and the overlap as n8n
    executions), for a same-run comparison; a change stops the bench. The fresh reads, as
    ``Executor._check_stale`` answers them."""
    old = dataclasses.replace(runner, in_process=False)
    fresh = await run_dag(plan, reads, old.run)
    if stale_changes(prints, before, fresh):
        raise SystemExit(f"plan {plan.plan_id}: stale in the bench")
    return {n: fresh[n] for n in reads if n in fresh}


def instrument(executor: Executor, marks_of: TimedTransport, *, as_before: bool = False) -> None:
    """Stamp the executor's phases (bench-only wrappers on one instance); ``as_before``: the
    staleness re-check through n8n as before issue 16.0."""
    prove = executor._prove_gates
    check = check_as_before if as_before else executor._check_stale

    def proving(*a: Any, **k: Any) -> Any:
        marks_of.marks.mark("redeem_start")
        try:
            return prove(*a, **k)
        finally:
            marks_of.marks.mark("redeem_end")

    async def checking(*a: Any, **k: Any) -> Any:
        marks_of.marks.mark("stale_start")
        try:
            return await check(*a, **k)
        finally:
            marks_of.marks.mark("stale_end")

    executor._prove_gates = proving  # type: ignore[method-assign]
    executor._check_stale = checking  # type: ignore[method-assign]


class LGState(TypedDict, total=False):
    user: str
    uid: str
    title: str
    slot: dict[str, str]
    status: int


def langgraph_app(conn_url: str, base_url: str, stamps: list[float]) -> tuple[Any, Any, Any]:
    """The LangGraph side: interrupt → PUT; returns (app, saver context, http client)."""
    from langgraph.checkpoint.postgres import PostgresSaver  # noqa: PLC0415
    from langgraph.graph import END, START, StateGraph  # noqa: PLC0415
    from langgraph.types import interrupt  # noqa: PLC0415

    http = httpx.Client(timeout=10)
    saver_cm = PostgresSaver.from_conn_string(conn_url)
    saver = saver_cm.__enter__()
    saver.setup()

    def ask(state: LGState) -> LGState:
        slot = interrupt({"question": "book this slot?", "uid": state["uid"]})
        return {"slot": slot}

    def write(state: LGState) -> LGState:
        slot = state["slot"]
        body = ics_event(
            uid=state["uid"],
            summary=state["title"],
            start=slot["start"],
            end=slot["end"],
            stamp=datetime.now(UTC),
        )
        r = http.put(
            f"{base_url}/{state['user']}/calendar/{state['uid']}.ics",
            content=body,
            headers={"If-None-Match": "*", "Content-Type": "text/calendar"},
        )
        stamps.append(time.perf_counter())
        return {"status": r.status_code}

    g = StateGraph(LGState)
    g.add_node("ask", ask)
    g.add_node("write", write)
    g.add_edge(START, "ask")
    g.add_edge("ask", "write")
    g.add_edge("write", END)
    return g.compile(checkpointer=saver), saver_cm, http


async def main_async(n: int) -> None:
    from langgraph.types import Command  # noqa: PLC0415

    tmp = Path(tempfile.mkdtemp(prefix="bench-approve-"))
    cache = Path(os.environ.get("COUNTERSIGN_CACHE_DIR") or Settings().cache_dir)
    engine = os.environ.get("BENCH_N8N_EXPRESSION_ENGINE")
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
        url = stack.enter_context(embedded_server(tmp / "pg"))
        db = Database.from_url(url)
        stack.callback(db.dispose)
        registry = load_registry(source_registry_dir())
        ring = KeyRing.from_seed(os.urandom(32), pubkey_id="k1", created_at=datetime.now(UTC))
        settings = {"caldav_base_url": radicale.base_url, "smtp_from": "cs@example.com"}
        for u in (ALICE, BOB):
            radicale.make_calendar(u)
        lg_stamps: list[float] = []
        app, saver_cm, lg_http = langgraph_app(
            url.replace("postgresql+psycopg://", "postgresql://"), radicale.base_url, lg_stamps
        )
        stack.callback(lg_http.close)
        stack.callback(saver_cm.__exit__, None, None, None)
        modes = ("now", "before")  # before: the staleness re-check through n8n, as before 16.0
        cs: dict[str, list[float]] = {m: [] for m in modes}
        lg: list[float] = []
        previews: list[float] = []
        # the preview's steps alone: now (same-op reads batched into one n8n execution, analyze
        # in-process), one n8n execution per read (analyze in-process), everything on n8n (before)
        dag_modes = ("now", "unbatched", "before")
        dag: dict[str, list[float]] = {m: [] for m in dag_modes}
        one_read: dict[str, list[float]] = {"n8n": [], "direct": []}
        parts = (
            "approve (token issued)",
            "verify + redeem + plan state",
            "staleness re-check",
            "claim (ledger + audit) before the send",
            "the write through n8n",
        )
        split: dict[str, dict[str, list[float]]] = {m: {k: [] for k in parts} for m in modes}
        server_get: list[float] = []
        server_put: list[float] = []
        async with N8nClient(handle.base_url, handle.api_key) as client:
            timed = TimedTransport(N8nTransport(client))
            recorder = StoreRecorder(db, clock=system_clock)
            executors = {
                m: Executor(keys=ring, registry=registry, transport=timed, db=db, settings=settings)
                for m in modes
            }
            instrument(executors["now"], timed)
            instrument(executors["before"], timed, as_before=True)
            approvals = Approvals(db, clock=system_clock)

            def plan_for(i: int) -> tuple[Plan, dict[str, Any], str]:
                user = f"cs{i}@example.com"
                radicale.make_calendar(user)
                intent = Intent.model_validate(
                    {
                        "intent": "find_meeting_time",
                        "intent_id": f"01JDQ3Z00000000000000{i:05d}",
                        "received_at": _utc_text(datetime.now(UTC)),
                        "user_id": user,
                        "entities": {
                            "participants": [ALICE, BOB],
                            "duration_min": 30,
                            "title": f"bench {i}",
                            "window_start": "2037-11-23T13:00:00Z",
                            "window_end": "2037-11-23T18:00:00Z",
                        },
                    }
                )
                plan = make_plan(intent, [], registry, LOCAL)
                if not isinstance(plan, Plan):
                    raise SystemExit(f"no plan: {plan}")
                pid, key = ring.active()
                doc = sign_plan(plan, key=key, pubkey_id=pid, signer="planner@system").to_json()
                return plan, doc, user

            async def countersign_round(i: int, mode: str) -> None:
                plan, doc, user = plan_for(i if mode == "now" else 50_000 + i)
                t0 = time.perf_counter()
                pv = await run_preview(
                    doc,
                    keys=ring,
                    registry=registry,
                    transport=timed,
                    recorder=recorder,
                    settings=settings,
                    actor=user,
                    now=system_clock(),
                )
                if mode == "now":
                    previews.append((time.perf_counter() - t0) * 1000)
                    runner = N8nStepRunner(
                        plan=plan,
                        plan_hash=doc["plan_hash"],
                        registry=registry,
                        transport=timed,
                        settings=settings,
                        read_only=True,
                    )
                    for m_ in dag_modes if i % 2 else dag_modes[::-1]:
                        r_ = {
                            "now": dataclasses.replace(runner, batch_reads=True),
                            "unbatched": runner,
                            "before": dataclasses.replace(runner, in_process=False),
                        }[m_]
                        t0 = time.perf_counter()
                        out = await run_dag(plan, [1, 2, 3], r_.run)
                        dag[m_].append((time.perf_counter() - t0) * 1000)
                        if out != pv.outputs:
                            raise SystemExit(f"round {i}: {m_} differs from the preview")
                    async with httpx.AsyncClient(timeout=10) as h_:
                        await runner.read_direct(h_, plan.step(1), {})
                        for how in ("n8n", "direct") if i % 2 else ("direct", "n8n"):
                            t0 = time.perf_counter()
                            if how == "n8n":
                                await runner.run(plan.step(1), {})
                            else:
                                await runner.read_direct(h_, plan.step(1), {})
                            one_read[how].append((time.perf_counter() - t0) * 1000)
                steps: Any = pv.wrapper.normalized["steps"]
                slot = steps["3"]["slots"][-1]
                # the choice the card offers: a free stretch's start and the signed length
                begin = datetime.fromisoformat(slot["start"])
                slot = {"start": slot["start"], "end": _utc_text(begin + timedelta(minutes=30))}
                timed.marks = m = Marks()
                t0 = time.perf_counter()
                token = approvals.issue(
                    plan_id=plan.plan_id,
                    plan_hash=doc["plan_hash"],
                    gate_id="gate-A",
                    user_id=user,
                    scopes=["calendar.write"],
                    ttl_s=300,
                    choice={"start": slot["start"], "end": slot["end"]},
                ).token
                m.mark("approved")
                report = await executors[mode].execute(doc, user_id=user, tokens={"gate-A": token})
                if report.status != "completed":
                    raise SystemExit(f"round {i}: {report}")
                t = m.t
                cs[mode].append((t["write_answered"] - t0) * 1000)
                sp = split[mode]
                sp["approve (token issued)"].append((t["approved"] - t0) * 1000)
                sp["verify + redeem + plan state"].append(
                    (t.get("stale_start", t["write_sent"]) - t["approved"]) * 1000
                )
                sp["staleness re-check"].append(
                    (t["stale_end"] - t["stale_start"]) * 1000 if "stale_start" in t else 0.0
                )
                sp["claim (ledger + audit) before the send"].append(
                    (t["write_sent"] - t.get("stale_end", t["write_sent"])) * 1000
                )
                sp["the write through n8n"].append((t["write_answered"] - t["write_sent"]) * 1000)

            def langgraph_round(i: int) -> None:
                user = f"lg{i}@example.com"
                radicale.make_calendar(user)
                config: Any = {"configurable": {"thread_id": f"bench-{i}"}}
                app.invoke({"user": user, "uid": f"lg-{i}-event", "title": f"bench {i}"}, config)
                slot = {"start": "2037-11-23T17:00:00Z", "end": "2037-11-23T18:00:00Z"}
                t0 = time.perf_counter()
                out = app.invoke(Command(resume=slot), config)
                if out.get("status") != 201:
                    raise SystemExit(f"langgraph round {i}: {out}")
                lg.append((lg_stamps[-1] - t0) * 1000)

            # warm both (workflows deployed, connections open, plans cached), then interleave
            await countersign_round(49_999, "now")
            await countersign_round(49_999, "before")
            langgraph_round(99_999)
            for i in range(n):
                order = ["lg", "now", "before"]
                order = order[i % 3 :] + order[: i % 3]  # each system first, second, third alike
                for who in order:
                    if who == "lg":
                        langgraph_round(i)
                    else:
                        await countersign_round(i, who)

            # the CalDAV server's own time (direct, keep-alive)
            async with httpx.AsyncClient(timeout=10) as h:
                base = radicale.base_url
                await h.get(f"{base}/{ALICE}/calendar/")
                for i in range(n):
                    t0 = time.perf_counter()
                    r = await h.get(f"{base}/{ALICE}/calendar/")
                    server_get.append((time.perf_counter() - t0) * 1000)
                    r.raise_for_status()
                    body = ics_event(
                        uid=f"direct-{i}",
                        summary="direct",
                        start="2026-11-24T09:00:00Z",
                        end="2026-11-24T09:30:00Z",
                        stamp=datetime.now(UTC),
                    )
                    t0 = time.perf_counter()
                    r = await h.put(
                        f"{base}/{BOB}/calendar/direct-{i}.ics",
                        content=body,
                        headers={"If-None-Match": "*", "Content-Type": "text/calendar"},
                    )
                    server_put.append((time.perf_counter() - t0) * 1000)
                    r.raise_for_status()
    finally:
        stack.close()

    print(
        f"machine: {machine()}; n8n 2.41.1 on Node 24, expression engine "
        f"{engine or 'default'}; loopback; n={n} interleaved rounds; "
        "other sessions share this 2-core machine\n"
    )

    def row(name: str, xs: list[float]) -> None:
        med, p95 = summary(xs)
        print(f"| {name} | {med:.1f} | {p95:.1f} |")

    print("| approve → first write answered | median ms | p95 ms |")
    print("| --- | ---: | ---: |")
    row("Countersign now (direct re-read, analyze in-process)", cs["now"])
    row("Countersign as before 16.0 (re-read + analyze as n8n executions)", cs["before"])
    row("LangGraph 1.2 + PostgresSaver (resume → PUT)", lg)
    lg_med, lg_p95 = summary(lg)
    for m in modes:
        med, p95 = summary(cs[m])
        print(f"| ratio Countersign {m} / LangGraph | {med / lg_med:.1f}× | {p95 / lg_p95:.1f}× |")
    print("\n| Countersign split (now / as before) | median ms | p95 ms |")
    print("| --- | ---: | ---: |")
    for name in parts:
        a, b = summary(split["now"][name]), summary(split["before"][name])
        print(f"| {name} | {a[0]:.1f} / {b[0]:.1f} | {a[1]:.1f} / {b[1]:.1f} |")
    print("\n| preview and reads | median ms | p95 ms |")
    print("| --- | ---: | ---: |")
    row(
        "preview, 3-read plan (verify + 2 CalDAV reads as one batched n8n execution → overlap "
        "in-process + store in one transaction)",
        previews,
    )
    row("the preview's 3 steps alone: 2 reads batched in one n8n execution", dag["now"])
    row(
        "the preview's 3 steps alone: one n8n execution per read (before batching)",
        dag["unbatched"],
    )
    row(
        "the preview's 3 steps alone: reads and overlap as n8n executions (before 16.1)",
        dag["before"],
    )
    row("one CalDAV read as an n8n execution (the n8n floor + Radicale)", one_read["n8n"])
    row("one CalDAV read direct (httpx, the staleness path)", one_read["direct"])
    row("Radicale alone: GET of a calendar collection (keep-alive)", server_get)
    row("Radicale alone: PUT of one event (keep-alive)", server_put)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=80)
    asyncio.run(main_async(ap.parse_args().n))
