"""The chaos harness: run a use case's plan on the real stack, SIGKILL one process at a random
point of its execute, start it again, let the plan finish (the interactive reconciler's passes,
then the person's finish or undo where it offers them), and check the invariants after every run.

A run is fully decided by its seed (``random.Random(seed)``: which process, when): a failing
run's seed replays it (``COUNTERSIGN_CHAOS_SEED``).

Checked after every run (``Violation`` names the rule):
- ``twice``: no external effect twice — at most one event per calendar per meeting UID, at most
  one mail per recipient per meeting (counted at Radicale and the mail server);
- ``half``: the meeting is whole or gone — both calendars have the event, or neither;
- ``stuck``: the plan is terminal, or waits for a person with an offer (``needs_attention`` with
  finish/undo), never ``running``;
- ``approval``: the approval spent is not lost: it ended passed (completed) or spent (failed or
  undone), or a fresh approval runs the plan (nothing was written);
- ``audit``: the audit chain verifies;
- ``log``: the event log agrees with the providers — a completed plan has every event and mail, a
  failed or undone one has no event left.
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from countersign.api.core import ASKING, TERMINAL, fold_events
from countersign.approvals import Approvals
from countersign.audit import AuditLog
from countersign.execute import Executor
from countersign.execute.settle import Settlement, Settler
from countersign.execute.settling import SettleLoop
from countersign.kernel import CountersignError, Intent, Policy, system_clock
from countersign.kernel.process import group_alive, kill_group
from countersign.n8n import N8nClient, N8nHandle
from countersign.n8n.executions import RecordScan
from countersign.n8n.runtime import N8nInstall, start
from countersign.planner.testing import signed_plan
from countersign.preview import run_preview
from countersign.registry import Registry
from countersign.sandbox import Radicale, SmtpSink
from countersign.signer import KeyRing
from countersign.steps import N8nTransport, StoreRecorder
from countersign.storage import Database, PlanEvents, PlanStore
from countersign.workflowbuilder import CredentialRef

LOCAL = Policy(providers={"calendar": "caldav", "mail": "smtp", "chat": "slack"})
ALICE, BOB = "alice@example.com", "bob@example.com"
PEOPLE = (ALICE, BOB)
#: the meeting's writes: the two events, then the two mails
EVENT_STEPS, MAIL_STEPS = (5, 6), (7, 8)


@dataclass
class KillableN8n:
    """An n8n of the harness's own that may be SIGKILLed and started again on the same port
    and data folder (its workflows, credentials and API key survive)."""

    inst: N8nInstall
    data_dir: Path
    handle: N8nHandle
    kills: int = 0

    @classmethod
    def start(cls, inst: N8nInstall, data_dir: Path) -> KillableN8n:
        return cls(inst, data_dir, start(inst, data_dir))

    @property
    def port(self) -> int:
        return int(self.handle.base_url.rsplit(":", 1)[1])

    def kill(self) -> None:
        """SIGKILL n8n's whole process group (the main process and its task runners)."""
        kill_group(self.handle.pid, signal.SIGKILL)
        deadline = time.monotonic() + 15
        while group_alive(self.handle.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.kills += 1

    def restart(self) -> None:
        self.handle = start(self.inst, self.data_dir, port=self.port)

    def client(self, timeout_s: float = 10.0) -> N8nClient:
        return N8nClient(self.handle.base_url, self.handle.api_key, timeout_s=timeout_s)


@dataclass
class Run:
    """One chaos run: what was killed when, what the plan became, what broke."""

    seed: int
    process: str
    kill_at_ms: int
    plan_id: str = ""
    execute: str = ""
    settled: str = ""
    #: the reconciler's last word per write (step: done | unknown | failed | pending)
    writes: dict[int, str] = field(default_factory=dict)
    final: str = ""
    violations: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def line(self) -> str:
        v = "; ".join(self.violations) or "ok"
        return (
            f"seed={self.seed} kill={self.process}@{self.kill_at_ms}ms execute={self.execute} "
            f"settled={self.settled} {self.writes} final={self.final} {self.seconds:.1f}s: {v}"
        )


@dataclass
class MeetingWorld:
    """The meeting use case on a killable n8n, Radicale, a mail server and Postgres."""

    n8n: KillableN8n
    db: Database
    registry: Registry
    keyring: KeyRing
    radicale: Radicale
    smtp: SmtpSink
    smtp_credential: CredentialRef
    #: the sandbox mailbox page over ``smtp`` (the reconciler reads mails there)
    mailbox_url: str = ""
    counter: int = 0

    @property
    def settings(self) -> dict[str, str]:
        out = {"caldav_base_url": self.radicale.base_url, "smtp_from": "countersign@example.com"}
        return out | ({"mailbox_url": self.mailbox_url} if self.mailbox_url else {})

    def executor(self, transport: N8nTransport | None) -> Executor:
        return Executor(
            keys=self.keyring,
            registry=self.registry,
            transport=transport,
            db=self.db,
            settings=self.settings,
            credentials={"smtp": self.smtp_credential},
        )

    def signed(self, seed: int) -> dict[str, Any]:
        self.counter += 1
        day = (datetime.now(UTC) + timedelta(days=2 + self.counter % 20)).date().isoformat()
        intent = Intent.model_validate(
            {
                "intent": "schedule_meeting",
                "intent_id": f"01JDQ4C{seed % 10**9:09d}{self.counter:010d}"[:26],
                "received_at": datetime.now(UTC).replace(microsecond=0).isoformat(),
                "user_id": ALICE,
                "entities": {
                    "participants": list(PEOPLE),
                    "duration_min": 30,
                    "title": f"Chaos {seed} {self.counter}",
                    "window_start": f"{day}T08:00:00Z",
                    "window_end": f"{day}T20:00:00Z",
                },
            }
        )
        return signed_plan(intent, self.keyring, self.registry, LOCAL)

    async def preview_and_approve(
        self, doc: dict[str, Any], transport: N8nTransport
    ) -> dict[str, str]:
        preview = await run_preview(
            doc,
            keys=self.keyring,
            registry=self.registry,
            transport=transport,
            recorder=StoreRecorder(self.db, clock=system_clock),
            settings=self.settings,
            credentials={"smtp": self.smtp_credential},
            actor=ALICE,
            now=system_clock(),
        )
        steps: Any = preview.wrapper.normalized["steps"]
        first = str(steps["3"]["slots"][0]["start"])
        start_at = datetime.fromisoformat(first.replace("Z", "+00:00"))
        end = (start_at + timedelta(minutes=30)).isoformat().replace("+00:00", "Z")
        return self.approve(doc, {"start": first, "end": end})

    def approve(self, doc: dict[str, Any], slot: dict[str, str]) -> dict[str, str]:
        token = (
            Approvals(self.db, clock=system_clock)
            .issue(
                plan_id=doc["plan"]["plan_id"],
                plan_hash=doc["plan_hash"],
                gate_id="gate-A",
                user_id=ALICE,
                scopes=["calendar.write", "mail.send"],
                ttl_s=300,
                choice=slot,
            )
            .token
        )
        return {"gate-A": token}

    def uid_of(self, doc: dict[str, Any]) -> str:
        return str(doc["plan"]["graph"][EVENT_STEPS[0] - 1]["args"]["uid"])

    def effects(self, doc: dict[str, Any]) -> dict[str, tuple[int, int]]:
        """Per person: (events with the meeting's UID, mails about the meeting)."""
        uid, title = self.uid_of(doc), doc["plan"]["intent"]["entities"]["title"]
        out = {}
        for p in PEOPLE:
            events = sum(1 for name in self.radicale.events(p) if name == f"{uid}.ics")
            mails = sum(1 for m in self.smtp.to(p) if title in str(m.get("Subject", "")))
            out[p] = (events, mails)
        return out


class World(Protocol):
    """What the reconciler's passes need of a use case's world (meeting, shopping)."""

    db: Database

    def executor(self, transport: N8nTransport | None) -> Executor: ...


def settler_for(world: World, transport: N8nTransport) -> Settler:
    return Settler(
        lambda: world.executor(transport), settle_after_s=1.0, scan=RecordScan(skew=timedelta(0))
    )


async def settle_until_quiet(
    world: World, transport: N8nTransport, plan_id: str, *, deadline_s: float = 60.0
) -> Settlement | None:
    """The reconciler's passes (as the API runs them) until the plan's execute has an end."""
    loop = SettleLoop(
        settler_for(world, transport), PlanEvents(world.db), quiet_s=0, attention_after_s=8.0
    )
    last: Settlement | None = None
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        for s in await loop.pass_once():
            if s.plan_id == plan_id:
                last = s
        if plan_status(world.db, plan_id)[0] != "running":
            return last
        await asyncio.sleep(0.5)
    return last


def plan_status(db: Database, plan_id: str) -> tuple[str, dict[str, str]]:
    state = fold_events(PlanEvents(db).since(plan_id, limit=5_000))
    return state.status, state.gates


async def _execute(
    world: MeetingWorld, doc: dict[str, Any], tokens: dict[str, str], timeout_s: float
) -> str:
    async with world.n8n.client(timeout_s=timeout_s) as client:
        try:
            report = await world.executor(N8nTransport(client)).execute(
                doc, user_id=ALICE, tokens=tokens
            )
        except (CountersignError, OSError) as e:
            return type(e).__name__
        return report.status


async def meeting_run(
    world: MeetingWorld, seed: int, *, kill_window_ms: int, person: bool = True
) -> Run:
    """One run: plan, preview, approve, execute with n8n SIGKILLed ``0..kill_window_ms`` into
    it, n8n started again, the reconciler's passes, then the person's finish or undo if offered;
    the invariants checked."""
    rnd = random.Random(seed)
    kill_at = rnd.randint(0, kill_window_ms)
    run = Run(seed, "n8n", kill_at)
    t0 = time.monotonic()
    doc = world.signed(seed)
    run.plan_id = doc["plan"]["plan_id"]
    async with world.n8n.client() as client:
        tokens = await world.preview_and_approve(doc, N8nTransport(client))
    task = asyncio.create_task(_execute(world, doc, tokens, timeout_s=10.0))
    await asyncio.sleep(kill_at / 1000)
    await asyncio.to_thread(world.n8n.kill)
    run.execute = await task
    await asyncio.to_thread(world.n8n.restart)
    async with world.n8n.client() as client:
        transport = N8nTransport(client)
        settled = await settle_until_quiet(world, transport, run.plan_id)
        run.settled = settled.status if settled else "-"
        run.writes = dict(settled.writes) if settled else {}
        if person:
            await _person(world, transport, run.plan_id, doc, run)
    run.final, gates = plan_status(world.db, run.plan_id)
    run.violations = check_meeting(world, doc, run.final, gates)
    run.seconds = time.monotonic() - t0
    return run


async def _person(
    world: MeetingWorld, transport: N8nTransport, plan_id: str, doc: dict[str, Any], run: Run
) -> None:
    """What a person does with the card: finish when offered, else undo; a plan that never
    wrote anything (n8n died before the first write) is approved again and executed."""
    settler = settler_for(world, transport)
    shown = settler.describe(plan_id, user_id=ALICE)
    if "finish" in shown.offers:
        await settler.finish(plan_id, user_id=ALICE)
    elif "undo" in shown.offers:
        await settler.undo(plan_id, user_id=ALICE)
    status, _ = plan_status(world.db, plan_id)
    if status not in TERMINAL and status not in (*ASKING, "waiting", "running"):
        # nothing written (cut before the first write): a fresh approval runs it
        slot = _slot_of(world, plan_id)
        if slot is not None:
            run.execute += "+again:" + await _execute(world, doc, world.approve(doc, slot), 30.0)


def _slot_of(world: MeetingWorld, plan_id: str) -> dict[str, str] | None:
    row = PlanStore(world.db, clock=system_clock).get(plan_id)
    for s in (row or {}).get("steps", []):
        out = s.get("output")
        if s["step"] == 4 and isinstance(out, dict) and isinstance(out.get("choice"), dict):
            return dict(out["choice"])
    return None


def check_meeting(
    world: MeetingWorld, doc: dict[str, Any], status: str, gates: dict[str, str]
) -> list[str]:
    """The invariants after a meeting run (module docstring)."""
    bad: list[str] = []
    effects = world.effects(doc)
    events = [e for e, _ in effects.values()]
    mails = [m for _, m in effects.values()]
    if max(events + mails) > 1:
        bad.append(f"twice: {effects}")
    if len(set(events)) > 1:
        bad.append(f"half: events {effects}")
    if status == "running" or status not in (*TERMINAL, *ASKING, "waiting", "approved"):
        bad.append(f"stuck: plan {status}")
    if status in ASKING:
        shown = Settler(lambda: world.executor(None)).describe(
            doc["plan"]["plan_id"], user_id=ALICE
        )
        if not shown.offers:
            bad.append("stuck: needs attention with nothing offered")
    if gates.get("gate-A") not in ("passed", "spent") and status in TERMINAL:
        bad.append(f"approval: gate-A {gates.get('gate-A')} on a {status} plan")
    with world.db.tx() as c:
        report = AuditLog(clock=system_clock).verify(c)
    if not report.ok:
        bad.append(f"audit: {report.reason} at {report.first_bad_seq}")
    if status == "completed" and (events != [1, 1] or mails != [1, 1]):
        bad.append(f"log: completed but providers hold {effects}")
    if status == "failed" and any(events):
        bad.append(f"log: failed but events stand {effects}")
    return bad


Runner = Callable[[int], Awaitable[Run]]
