"""Benchmark: approve → first calendar write ARRIVING at the CalDAV server, Countersign vs
LangGraph + PostgresSaver, on the meeting plan as the API runs it (issue 28 §2).

One process, one embedded PostgreSQL, one Radicale with a stopwatch at its door
(``caldav_arrivals.py``: its own process stamps each PUT with ``CLOCK_MONOTONIC`` when the request
reaches the application), one SMTP sink, one n8n. Rounds interleave the two systems (the order
flips every round); each round books its own day, so every round finds the window free.

What each clock measures (both stop at the same event: the FIRST PUT of the round reaching
Radicale; Radicale's own PUT time is in neither):

- Countersign: a fresh ``schedule_meeting`` plan (alice and bob, the API's meeting: two
  ``caldav.create_event`` writes after gate-A, run at once, then two mails) is signed and
  previewed, untimed. The clock starts, the person approves gate-A (``Approvals.issue``: the token
  and its stored choice) and the plan is executed by the ``Executor`` the API wires (the policy's
  gate rules checked again, resource locks, the staleness re-check by validators, the ledger
  claim with its audit row, the step webhook on n8n). The clock stops when the first of the two
  PUTs arrives at Radicale. The split comes from timestamps around the executor's phases.
- LangGraph 1.2 (bench-only extra ``bench``): ``ask`` (``interrupt()``) then two nodes that run at
  once, each PUTting one event with httpx (keep-alive), compiled with ``PostgresSaver`` on the same
  Postgres (durability ``sync``, the default for ``invoke``: every step's checkpoint committed
  before the next step). The graph runs up to the interrupt untimed; the clock starts, then
  ``invoke(Command(resume=slot))``; it stops when the first of the two PUTs arrives at Radicale.
  Its split: resume → the write nodes start (checkpoint read, ``ask`` run again with the resume
  value, its checkpoint written), → the PUT's arrival (the event's text, httpx's send), and after
  the clock: the server's PUT, the final checkpoints.

Postgres round trips of the gate path (approve → the first write's webhook call) are counted with
SQLAlchemy events on the executor's engine: connection checkouts (each a pre-ping), statements,
commits. The client talks to the server once per statement, once per BEGIN, once per COMMIT and
once per ping (psycopg 3, no pipeline).

Run: ``.venv/bin/python bench/bench_approve_write.py [--n 40]`` (needs ``pip install -e
'.[bench]'``; starts its own n8n, Radicale, SMTP sink and PostgreSQL in a temp folder and stops
them). n8n runs with the served expression engine (``vm``, isolated); ``BENCH_N8N_ENV='{"NAME":
"value"}'`` adds settings.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypedDict

import httpx
from sqlalchemy import event

sys.path.insert(0, str(Path(__file__).parent))
import caldav_arrivals
from common import machine, summary

from countersign.binding import ics_event
from countersign.execute import Executor
from countersign.kernel import Intent, Plan, Policy, Settings, source_registry_dir, system_clock
from countersign.n8n import N8nClient, install, start, stop
from countersign.planner import make_plan
from countersign.preview import run_preview
from countersign.registry import load_registry
from countersign.sandbox import free_port, serve_smtp
from countersign.signer import KeyRing, sign_plan
from countersign.steps import N8nTransport, StoreRecorder
from countersign.storage import Database, embedded_server
from countersign.workflowbuilder import CredentialRef

LOCAL = Policy(providers={"calendar": "caldav", "mail": "smtp", "chat": "slack"})
ALICE, BOB = "alice@example.com", "bob@example.com"
DAY0 = datetime(2037, 11, 23, 13, tzinfo=UTC)


def _utc_text(t: datetime) -> str:
    return t.replace(microsecond=0).isoformat().replace("+00:00", "Z")


class Counter:
    """Postgres traffic on one engine: checkouts (pre-pings), statements, commits."""

    def __init__(self, engine: Any) -> None:
        self.checkouts = self.statements = self.commits = 0
        event.listen(engine, "checkout", self._checkout)
        event.listen(engine, "before_cursor_execute", self._statement)
        event.listen(engine, "commit", self._commit)

    def _checkout(self, *_: Any) -> None:
        self.checkouts += 1

    def _statement(self, *_: Any) -> None:
        self.statements += 1

    def _commit(self, *_: Any) -> None:
        self.commits += 1

    def now(self) -> tuple[int, int, int]:
        return self.checkouts, self.statements, self.commits


class Marks:
    """Timestamps (perf_counter, seconds) and Postgres counts of one Countersign round."""

    def __init__(self, counter: Counter) -> None:
        self.t: dict[str, float] = {}
        self.pg: dict[str, tuple[int, int, int]] = {}
        self.counter = counter

    def mark(self, name: str) -> None:
        if name not in self.t:
            self.t[name] = time.perf_counter()
            self.pg[name] = self.counter.now()


class TimedTransport:
    """The n8n transport with the first write's webhook call stamped."""

    def __init__(self, inner: N8nTransport, marks: Marks) -> None:
        self.inner = inner
        self.marks = marks

    async def deploy(self, workflow: Any) -> None:
        await self.inner.deploy(workflow)

    async def call(
        self, path: str, body: Mapping[str, Any], *, write: bool = False
    ) -> Mapping[str, Any]:
        if write:
            self.marks.mark("write_sent")
        out = await self.inner.call(path, body, write=write)
        if write:
            self.marks.mark("write_answered")
        return out

    async def call_batch(self, path: str, body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        return await self.inner.call_batch(path, body)


def instrument(executor: Executor, timed: TimedTransport) -> None:
    """Stamp the executor's phases (bench-only wrappers on one instance)."""
    prove = executor._prove_gates
    check = executor._check_stale

    def proving(*a: Any, **k: Any) -> Any:
        timed.marks.mark("redeem_start")
        try:
            return prove(*a, **k)
        finally:
            timed.marks.mark("redeem_end")

    async def checking(*a: Any, **k: Any) -> Any:
        timed.marks.mark("stale_start")
        try:
            return await check(*a, **k)
        finally:
            timed.marks.mark("stale_end")

    executor._prove_gates = proving  # type: ignore[method-assign]
    executor._check_stale = checking  # type: ignore[method-assign]


class LGState(TypedDict, total=False):
    uid: str
    title: str
    slot: dict[str, str]
    status_a: int
    status_b: int


def langgraph_app(conn_url: str, base_url: str, stamps: dict[str, float]) -> tuple[Any, Any, Any]:
    """The LangGraph side: interrupt → two PUTs at once; returns (app, saver context, client)."""
    from langgraph.checkpoint.postgres import PostgresSaver  # noqa: PLC0415
    from langgraph.graph import END, START, StateGraph  # noqa: PLC0415
    from langgraph.types import interrupt  # noqa: PLC0415

    http = httpx.Client(timeout=10, limits=httpx.Limits(max_keepalive_connections=4))
    saver_cm = PostgresSaver.from_conn_string(conn_url)
    saver = saver_cm.__enter__()
    saver.setup()

    def ask(state: LGState) -> LGState:
        slot = interrupt({"question": "book this slot?", "uid": state["uid"]})
        return {"slot": slot}

    def put(state: LGState, user: str) -> int:
        stamps.setdefault("node", time.perf_counter())
        slot = state["slot"]
        body = ics_event(
            uid=state["uid"],
            summary=state["title"],
            start=slot["start"],
            end=slot["end"],
            stamp=datetime.now(UTC),
        )
        r = http.put(
            f"{base_url}/{user}/calendar/{state['uid']}.ics",
            content=body,
            headers={"If-None-Match": "*", "Content-Type": "text/calendar"},
        )
        stamps.setdefault("answered", time.perf_counter())
        return r.status_code

    def write_a(state: LGState) -> LGState:
        return {"status_a": put(state, ALICE)}

    def write_b(state: LGState) -> LGState:
        return {"status_b": put(state, BOB)}

    g = StateGraph(LGState)
    g.add_node("ask", ask)
    g.add_node("write_a", write_a)
    g.add_node("write_b", write_b)
    g.add_edge(START, "ask")
    g.add_edge("ask", "write_a")
    g.add_edge("ask", "write_b")
    g.add_edge("write_a", END)
    g.add_edge("write_b", END)
    return g.compile(checkpointer=saver), saver_cm, http


CS_PARTS = (
    "approve (token issued)",
    "verify + redeem + plan state",
    "staleness re-check (validators)",
    "gate step + claim (ledger + audit) + prepare",
    "n8n: webhook call → first PUT arrives",
)
LG_PARTS = (
    "resume → write nodes start (checkpoint read, ask again, checkpoint write)",
    "write node → first PUT arrives (ics text, httpx send)",
)
AFTER = (
    "after the clock: first PUT arrives → its answer is back (Countersign / LangGraph)",
    "after the clock: LangGraph invoke returns (final checkpoints)",
)


class Results:
    def __init__(self) -> None:
        self.cs: list[float] = []
        self.lg: list[float] = []
        self.cs_answered: list[float] = []
        self.lg_answered: list[float] = []
        self.split: dict[str, list[float]] = {k: [] for k in CS_PARTS + LG_PARTS + AFTER}
        self.lg_after_answer: list[float] = []
        self.pg: dict[str, list[int]] = {"checkouts": [], "statements": [], "commits": []}


def first_arrival(arrivals: caldav_arrivals.Arrivals, t0: float) -> float:
    puts = [t for t, _ in arrivals.take() if t >= t0]
    if not puts:
        raise SystemExit("no PUT arrived at the CalDAV server in this round")
    return min(puts)


async def main_async(n: int) -> None:
    from langgraph.types import Command  # noqa: PLC0415

    tmp = Path(tempfile.mkdtemp(prefix="bench-approve-"))
    cache = Path(os.environ.get("COUNTERSIGN_CACHE_DIR") or Settings().cache_dir)
    # the expression engine the served n8n runs (Settings.n8n_expression_engine: isolated vm)
    n8n_env: dict[str, str] = {
        "N8N_EXPRESSION_ENGINE": "vm",
        **json.loads(os.environ.get("BENCH_N8N_ENV") or "{}"),
    }
    stack = contextlib.ExitStack()
    res = Results()
    try:  # every server started below is stopped, whatever fails
        stack.callback(shutil.rmtree, tmp, True)
        handle = start(install(cache), tmp / "n8n", extra_env=n8n_env)
        stack.callback(stop, tmp / "n8n")
        arrivals = stack.enter_context(caldav_arrivals.start(tmp / "radicale", free_port()))
        smtp = stack.enter_context(serve_smtp())
        url = stack.enter_context(embedded_server(tmp / "pg"))
        db = Database.from_url(url)
        stack.callback(db.dispose)
        counter = Counter(db.engine)
        registry = load_registry(source_registry_dir())
        ring = KeyRing.from_seed(os.urandom(32), pubkey_id="k1", created_at=datetime.now(UTC))
        base = arrivals.base_url
        settings = {
            "caldav_base_url": base,
            "smtp_host": smtp.host,
            "smtp_port": str(smtp.port),
            "smtp_from": "cs@example.com",
        }
        for u in (ALICE, BOB):
            httpx.request("MKCOL", f"{base}/{u}/", timeout=10)
            httpx.request("MKCALENDAR", f"{base}/{u}/calendar/", timeout=10)
        lg_stamps: dict[str, float] = {}
        app, saver_cm, lg_http = langgraph_app(
            url.replace("postgresql+psycopg://", "postgresql://"), base, lg_stamps
        )
        stack.callback(lg_http.close)
        stack.callback(saver_cm.__exit__, None, None, None)
        async with N8nClient(handle.base_url, handle.api_key) as client:
            cred = await client.create_credential(
                "bench smtp",
                "smtp",
                {
                    "host": smtp.host,
                    "port": smtp.port,
                    "secure": False,
                    "disableStartTls": True,
                    "user": "",
                    "password": "",
                },
            )
            credentials = {"smtp": CredentialRef(id=str(cred["id"]), name="bench smtp")}
            marks = Marks(counter)
            timed = TimedTransport(N8nTransport(client), marks)
            recorder = StoreRecorder(db, clock=system_clock)
            # the Executor as the API wires it (countersign.api.wiring._base)
            executor = Executor(
                keys=ring,
                registry=registry,
                transport=timed,
                db=db,
                settings=settings,
                credentials=credentials,
                clock=system_clock,
                policy=LOCAL,
            )
            instrument(executor, timed)
            approvals = executor.approvals

            def plan_for(i: int) -> tuple[Plan, dict[str, Any], str]:
                user = f"cs{i}@example.com"
                day = DAY0 + timedelta(days=i + 1000)
                intent = Intent.model_validate(
                    {
                        "intent": "schedule_meeting",
                        "intent_id": f"01JDQ3Z00000000000000{i:05d}",
                        "received_at": _utc_text(datetime.now(UTC)),
                        "user_id": user,
                        "entities": {
                            "participants": [ALICE, BOB],
                            "duration_min": 30,
                            "title": f"bench {i}",
                            "window_start": _utc_text(day),
                            "window_end": _utc_text(day + timedelta(hours=4)),
                        },
                    }
                )
                plan = make_plan(intent, [], registry, LOCAL)
                if not isinstance(plan, Plan):
                    raise SystemExit(f"no plan: {plan}")
                pid, key = ring.active()
                doc = sign_plan(plan, key=key, pubkey_id=pid, signer="planner@system").to_json()
                return plan, doc, user

            async def countersign_round(i: int, keep: bool) -> None:
                plan, doc, user = plan_for(i)
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
                steps: Any = pv.wrapper.normalized["steps"]
                slot = steps["3"]["slots"][0]
                begin = datetime.fromisoformat(slot["start"])
                choice = {"start": slot["start"], "end": _utc_text(begin + timedelta(minutes=30))}
                arrivals.take()
                timed.marks = m = Marks(counter)
                m.mark("start")
                t0 = m.t["start"]
                token = approvals.issue(
                    plan_id=plan.plan_id,
                    plan_hash=doc["plan_hash"],
                    gate_id="gate-A",
                    user_id=user,
                    scopes=["calendar.write", "mail.send"],
                    ttl_s=300,
                    choice=choice,
                ).token
                m.mark("approved")
                report = await executor.execute(doc, user_id=user, tokens={"gate-A": token})
                if report.status != "completed":
                    raise SystemExit(f"round {i}: {report}")
                arrived = first_arrival(arrivals, t0)
                if not keep:
                    return
                t = m.t
                res.cs.append((arrived - t0) * 1000)
                res.cs_answered.append((t["write_answered"] - t0) * 1000)
                sp = res.split
                sp[CS_PARTS[0]].append((t["approved"] - t0) * 1000)
                sp[CS_PARTS[1]].append((t["stale_start"] - t["approved"]) * 1000)
                sp[CS_PARTS[2]].append((t["stale_end"] - t["stale_start"]) * 1000)
                sp[CS_PARTS[3]].append((t["write_sent"] - t["stale_end"]) * 1000)
                sp[CS_PARTS[4]].append((arrived - t["write_sent"]) * 1000)
                sp[AFTER[0]].append((t["write_answered"] - arrived) * 1000)
                a, b = m.pg["approved"], m.pg["write_sent"]
                for k, x, y in zip(("checkouts", "statements", "commits"), a, b, strict=True):
                    res.pg[k].append(y - x)

            def langgraph_round(i: int, keep: bool) -> None:
                config: Any = {"configurable": {"thread_id": f"bench-{i}"}}
                app.invoke({"uid": f"lg-{i}-event", "title": f"bench {i}"}, config)
                day = DAY0 + timedelta(days=i + 1000)
                slot = {"start": _utc_text(day), "end": _utc_text(day + timedelta(minutes=30))}
                arrivals.take()
                lg_stamps.clear()
                t0 = time.perf_counter()
                out = app.invoke(Command(resume=slot), config)
                t_end = time.perf_counter()
                if out.get("status_a") != 201 or out.get("status_b") != 201:
                    raise SystemExit(f"langgraph round {i}: {out}")
                arrived = first_arrival(arrivals, t0)
                if not keep:
                    return
                res.lg.append((arrived - t0) * 1000)
                res.lg_answered.append((lg_stamps["answered"] - t0) * 1000)
                res.split[LG_PARTS[0]].append((lg_stamps["node"] - t0) * 1000)
                res.split[LG_PARTS[1]].append((arrived - lg_stamps["node"]) * 1000)
                res.lg_after_answer.append((lg_stamps["answered"] - arrived) * 1000)
                res.split[AFTER[1]].append((t_end - lg_stamps["answered"]) * 1000)

            loop = asyncio.get_running_loop()
            pool = ThreadPoolExecutor(1)  # LangGraph is sync: off the event loop, one at a time

            async def lg(i: int, keep: bool) -> None:
                await loop.run_in_executor(pool, langgraph_round, i, keep)

            # warm both (workflows deployed, connections open), then interleave
            for w in range(3):
                await countersign_round(90_000 + w, False)
                await lg(90_000 + w, False)
            for i in range(n):
                if i % 2:
                    await lg(i, True)
                    await countersign_round(i, True)
                else:
                    await countersign_round(i, True)
                    await lg(i, True)
            pool.shutdown()
    finally:
        stack.close()
    report(res, n, n8n_env)


def report(res: Results, n: int, n8n_env: Mapping[str, str]) -> None:
    print(
        f"machine: {machine()}; load {os.getloadavg()[0]:.1f}; n8n 2.41.1 on Node 24"
        f"{' with ' + json.dumps(dict(n8n_env)) if n8n_env else ''}; loopback; n={n} "
        "interleaved rounds; other sessions share this 2-core machine\n"
    )

    def row(name: str, xs: list[float]) -> None:
        med, p95 = summary(xs)
        print(f"| {name} | {med:.1f} | {p95:.1f} |")

    print("| approve → first PUT ARRIVES at the CalDAV server | median ms | p95 ms |")
    print("| --- | ---: | ---: |")
    row("Countersign (meeting plan: 2 calendar writes + 2 mails, as the API wires it)", res.cs)
    row("LangGraph 1.2 + PostgresSaver (resume → 2 PUTs at once)", res.lg)
    (cm, cp), (lm, lp) = summary(res.cs), summary(res.lg)
    print(f"| **ratio Countersign / LangGraph** | **{cm / lm:.1f}×** | **{cp / lp:.1f}×** |")
    print("\n| the old clock: … → first PUT's ANSWER back at the writer | median ms | p95 ms |")
    print("| --- | ---: | ---: |")
    row("Countersign", res.cs_answered)
    row("LangGraph", res.lg_answered)
    (cm, cp), (lm, lp) = summary(res.cs_answered), summary(res.lg_answered)
    print(f"| ratio | {cm / lm:.1f}× | {cp / lp:.1f}× |")
    print("\n| split | median ms | p95 ms |")
    print("| --- | ---: | ---: |")
    for name in CS_PARTS:
        row(f"Countersign: {name}", res.split[name])
    for name in LG_PARTS:
        row(f"LangGraph: {name}", res.split[name])
    row(AFTER[0].replace("(Countersign / LangGraph)", "(Countersign)"), res.split[AFTER[0]])
    row(AFTER[0].replace("(Countersign / LangGraph)", "(LangGraph)"), res.lg_after_answer)
    row(AFTER[1], res.split[AFTER[1]])
    print(
        "\n| Postgres on the gate path (approve done → first webhook call), per round | median | max |"
    )
    print("| --- | ---: | ---: |")
    for k, xs in res.pg.items():
        print(f"| {k} | {sorted(xs)[len(xs) // 2]} | {max(xs)} |")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=40)
    asyncio.run(main_async(ap.parse_args().n))
