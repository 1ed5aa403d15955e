"""Reconciliation of writes whose answer was lost, from n8n's own records (GLOBAL_SPEC §8 and §13
invariant 4; ExecuteOrchestrator SPEC 9), on real n8n, Postgres, Radicale and aiosmtpd.

The meeting's two mails reach a mail server that keeps each message but answers only after the
execute's webhook calls timed out: both keys are ``unknown``. Then:
- 1,000 newer executions of the same (shared) mail workflow: the key's execution is still found
  by what the ledger recorded at the send, the keys settle ``completed`` and a fresh approval
  sends nothing again (counted at the mail server);
- the execution deleted, or sent longer ago than n8n keeps executions: ``unknown``, never
  ``failed`` — a fresh approval is refused and nothing is sent again;
- a key whose request never reached n8n is ``failed`` only once n8n's records provably cover the
  send (an execution before it, one after it, every id between them held).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from sqlalchemy import text

from countersign.approvals import Approvals
from countersign.audit import AuditLog
from countersign.binding import render_data, resolve_step
from countersign.execute import Executor
from countersign.kernel import Intent, Plan, Policy, content_hash, system_clock
from countersign.n8n import N8nApiError, N8nClient, N8nHandle, free_port
from countersign.n8n.executions import RecordScan
from countersign.planner.testing import signed_plan
from countersign.preview import run_preview
from countersign.registry import Registry
from countersign.sandbox import Radicale, SmtpSink
from countersign.signer import KeyRing
from countersign.steps import N8nTransport, StoreRecorder, idempotency_key
from countersign.storage import Database, IdempotencyLedger, OutcomeUnknownError
from countersign.workflowbuilder import CredentialRef, build_workflow_for_step

LOCAL = Policy(providers={"calendar": "caldav", "mail": "smtp", "chat": "slack"})
ALICE, BOB, NOISE = "alice@example.com", "bob@example.com", "noise@example.com"
MAIL_STEPS = (7, 8)
#: the mail server answers a person's message this late; the execute's webhook calls give up first
HOLD_S, CLIENT_TIMEOUT_S = 5.0, 2.5
#: n8n runs on this machine: its clock is ours
SAME_CLOCK = RecordScan(skew=timedelta(0))
_counter = iter(range(1, 10_000))


@dataclass
class KeepsThenAnswersLate(SmtpSink):
    """Keeps every message; answers those to ``slow`` recipients only after ``HOLD_S``."""

    slow: frozenset[str] = field(default=frozenset({ALICE, BOB}))

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        reply = await super().handle_DATA(server, session, envelope)
        if self.slow & set(envelope.rcpt_tos):
            await asyncio.sleep(HOLD_S)
        return reply


@dataclass
class World:
    n8n: N8nHandle
    db: Database
    registry: Registry
    keyring: KeyRing
    radicale: Radicale
    smtp: KeepsThenAnswersLate
    settings: dict[str, str]
    creds: dict[str, CredentialRef]

    def mails_to(self, address: str) -> int:
        return len(self.smtp.to(address))

    def client(self, timeout_s: float = 30.0) -> N8nClient:
        return N8nClient(self.n8n.base_url, self.n8n.api_key, timeout_s=timeout_s)

    def executor(self, transport: N8nTransport) -> Executor:
        return Executor(
            keys=self.keyring,
            registry=self.registry,
            transport=transport,
            db=self.db,
            settings=self.settings,
            credentials=self.creds,
        )


@pytest.fixture
def world(
    n8n: N8nHandle, db: Database, registry: Registry, keyring: KeyRing, radicale: Radicale
) -> Iterator[World]:
    """Empty calendars for Alice and Bob, and a mail server of this test's own (its credential
    makes the mail op workflow this test's own too)."""
    import httpx

    for user in (ALICE, BOB):
        radicale.make_calendar(user)
        for name in radicale.events(user):
            httpx.delete(radicale.calendar_url(user) + name, timeout=5)
    smtp = KeepsThenAnswersLate(host="127.0.0.1", port=free_port())
    controller = Controller(smtp, hostname="127.0.0.1", port=smtp.port)
    controller.start()

    async def credential() -> dict[str, Any]:
        async with N8nClient(n8n.base_url, n8n.api_key) as c:
            return await c.create_credential(
                f"late smtp {smtp.port}",
                "smtp",
                {"host": smtp.host, "port": smtp.port, "secure": False, "disableStartTls": True}
                | {"user": "", "password": ""},
            )

    cred = asyncio.run(credential())
    try:
        yield World(
            n8n,
            db,
            registry,
            keyring,
            radicale,
            smtp,
            {"caldav_base_url": radicale.base_url, "smtp_from": "countersign@example.com"},
            {"smtp": CredentialRef(id=str(cred["id"]), name=str(cred["name"]))},
        )
    finally:
        controller.stop()


def _signed(w: World) -> dict[str, Any]:
    n = next(_counter)
    day = (datetime.now(UTC) + timedelta(days=2)).date().isoformat()
    intent = Intent.model_validate(
        {
            "intent": "schedule_meeting",
            "intent_id": f"01JDQ4R00000000000000{n:05d}",
            "received_at": datetime.now(UTC).replace(microsecond=0).isoformat(),
            "user_id": ALICE,
            "entities": {
                "participants": [ALICE, BOB],
                "duration_min": 30,
                "title": f"Reconcile {n}",
                "window_start": f"{day}T13:00:00Z",
                "window_end": f"{day}T18:00:00Z",
            },
        }
    )
    return signed_plan(intent, w.keyring, w.registry, LOCAL)


async def _preview(w: World, doc: dict[str, Any], transport: N8nTransport) -> dict[str, str]:
    """Preview the plan; the first slot it offers."""
    preview = await run_preview(
        doc,
        keys=w.keyring,
        registry=w.registry,
        transport=transport,
        recorder=StoreRecorder(w.db, clock=system_clock),
        settings=w.settings,
        credentials=w.creds,
        actor=ALICE,
        now=system_clock(),
    )
    steps: Any = preview.wrapper.normalized["steps"]
    first = str(steps["3"]["slots"][0]["start"])
    start = datetime.fromisoformat(first.replace("Z", "+00:00"))
    end = (start + timedelta(minutes=30)).isoformat().replace("+00:00", "Z")
    return {"start": first, "end": end}


_goes_on = iter(range(1, 1_000_000))


async def _n8n_goes_on(client: N8nClient) -> None:
    """One kept n8n execution now (a write-like workflow that saves its data): n8n's records
    reach past this moment. Previews no longer leave any (read workflows save nothing)."""
    path = f"goes-on-{next(_goes_on)}-{datetime.now(UTC).timestamp():.0f}"
    trigger = {"httpMethod": "POST", "path": path, "responseMode": "lastNode", "options": {}}
    code = {
        "mode": "runOnceForAllItems",
        "language": "javaScript",
        "jsCode": "return [{json: {}}];",
    }
    wf = {
        "name": f"test {path}",
        "nodes": [
            {
                "id": "t",
                "name": "Trigger",
                "type": "n8n-nodes-base.webhook",
                "typeVersion": 2,
                "position": [0, 0],
                "webhookId": path,
                "parameters": trigger,
            },
            {
                "id": "c",
                "name": "Code",
                "type": "n8n-nodes-base.code",
                "typeVersion": 2,
                "position": [300, 0],
                "parameters": code,
            },
        ],
        "connections": {"Trigger": {"main": [[{"node": "Code", "type": "main", "index": 0}]]}},
        "settings": {"executionOrder": "v1", "saveDataSuccessExecution": "all"},
    }
    created = await client.create_workflow(wf)
    await client.activate(created["id"])
    for _ in range(40):  # webhook registration is asynchronous on n8n 2.x
        try:
            await client.call_webhook(path, {})
            return
        except N8nApiError:
            await asyncio.sleep(0.25)
    raise AssertionError("the goes-on webhook never registered")


def _approve(w: World, doc: dict[str, Any], slot: dict[str, str]) -> dict[str, str]:
    token = (
        Approvals(w.db, clock=system_clock)
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


def _mail_workflow(w: World, doc: dict[str, Any]) -> tuple[str, str]:
    """The shared mail op workflow's name and webhook path."""
    plan = Plan.model_validate(doc["plan"])
    wf = build_workflow_for_step(
        plan, doc["plan_hash"], plan.step(MAIL_STEPS[0]), w.registry, credentials=w.creds
    )
    return str(wf.workflow["name"]), wf.path


async def _workflow_id(client: N8nClient, name: str) -> str:
    return next(str(x["id"]) for x in await client.list_workflows(name=name) if x["name"] == name)


async def _lose_the_mails_answers(w: World, doc: dict[str, Any]) -> dict[str, str]:
    """Execute the plan: the event is written, both mails arrive but their answers are lost
    (keys ``unknown``); returns once n8n has finished both executions. The offered slot."""
    async with w.client(timeout_s=CLIENT_TIMEOUT_S) as client:
        transport = N8nTransport(client)
        slot = await _preview(w, doc, transport)
        with pytest.raises(OutcomeUnknownError):
            await w.executor(transport).execute(doc, user_id=ALICE, tokens=_approve(w, doc, slot))
    assert (w.mails_to(ALICE), w.mails_to(BOB)) == (1, 1)
    async with w.client() as client:
        wid = await _workflow_id(client, _mail_workflow(w, doc)[0])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # n8n finishes the executions on its own
            running, _ = await client.executions_page(workflow_id=wid, status="running")
            done, _ = await client.executions_page(workflow_id=wid)
            if not running and len(done) == len(MAIL_STEPS):
                break
            await asyncio.sleep(0.2)
        else:
            raise AssertionError("n8n did not finish the two mail executions")
    assert {_key_state(w, doc, s) for s in MAIL_STEPS} == {"unknown"}
    return slot


def _key_state(w: World, doc: dict[str, Any], step: int) -> str:
    with w.db.tx() as c:
        return str(
            c.execute(
                text("SELECT state FROM idempotency_keys WHERE key LIKE :k"),
                {"k": f"{doc['plan']['plan_id']}:{step}:%"},
            ).scalar_one()
        )


async def _noise(w: World, doc: dict[str, Any], n: int) -> float:
    """``n`` executions of the mail workflow with harmless arguments (a mail to NOISE), 16 at a
    time; seconds taken."""
    plan = Plan.model_validate(doc["plan"])
    step = plan.step(MAIL_STEPS[0])
    node = resolve_step(step, w.registry)
    _, path = _mail_workflow(w, doc)
    t0 = time.perf_counter()
    gate = asyncio.Semaphore(16)

    async def one(client: N8nClient, i: int) -> None:
        args = {"to": NOISE, "subject": f"noise {i}", "body": "noise"}
        body = {
            "data": render_data(node, args, w.settings),
            "args": args,
            "plan": {"plan_id": "noise", "plan_hash": "noise", "step": 0},
        }
        async with gate:
            await client.call_webhook(path, body)

    async with w.client(timeout_s=60) as client:
        await asyncio.gather(*(one(client, i) for i in range(n)))
    return time.perf_counter() - t0


def _plan_of(execution: dict[str, Any]) -> str:
    trigger = execution["data"]["resultData"]["runData"]["Trigger"][0]
    return str(trigger["data"]["main"][0][0]["json"]["body"]["plan"]["plan_id"])


def _unsettled_reasons(w: World, doc: dict[str, Any]) -> list[str]:
    with w.db.tx() as c:
        return [
            str(r)
            for r in c.execute(
                text(
                    "SELECT reason FROM audit_log WHERE kind = 'reconcile_unsettled' "
                    "AND plan_id = :p ORDER BY seq"
                ),
                {"p": doc["plan"]["plan_id"]},
            ).scalars()
        ]


def test_lost_mail_answer_is_found_after_1000_newer_executions(world: World) -> None:
    """1,000 executions of the shared mail workflow after the lost answers: the newest 250 (what
    reconciliation read before) do not hold the keys' executions, reconciliation still finds
    them by the ledger's send time and the trigger body, settles both ``completed``, and a fresh
    approval answers them from the ledger — each person got the mail once."""
    w = world
    doc = _signed(w)
    slot = asyncio.run(_lose_the_mails_answers(w, doc))
    noise_s = asyncio.run(_noise(w, doc, 1_000))
    assert w.mails_to(NOISE) == 1_000

    async def settle() -> tuple[dict[int, str], float, list[Any]]:
        async with w.client() as client:
            transport = N8nTransport(client)
            newest = await transport.executions_of(_mail_workflow(w, doc)[0])
            t0 = time.perf_counter()
            settled = await w.executor(transport).reconcile(doc, user_id=ALICE)
            took = time.perf_counter() - t0
            report = await w.executor(transport).execute(
                doc, user_id=ALICE, tokens=_approve(w, doc, slot)
            )
            return settled, took, [newest, report]

    settled, took, (newest, report) = asyncio.run(settle())
    assert len(newest) == 250
    assert {_plan_of(e) for e in newest} == {"noise"}  # the keys' executions are older
    assert settled == {7: "completed", 8: "completed"}
    assert report.status == "completed"
    assert [(x.step, x.status) for x in report.wrappers] == [(s, "skipped") for s in (5, 6, 7, 8)]
    assert (w.mails_to(ALICE), w.mails_to(BOB)) == (1, 1)
    assert len(w.radicale.events(ALICE)) == 1
    print(
        f"\n1,000 newer executions made in {noise_s:.1f} s; reconcile of 2 keys took {took:.2f} s"
    )


@pytest.mark.parametrize("how", ["deleted", "aged"])
def test_pruned_record_stays_unknown(world: World, how: str) -> None:
    """The keys' executions are gone — deleted through n8n's API, or sent longer ago than n8n
    keeps executions (its 168 h pruning) — and newer executions exist: the keys stay
    ``unknown`` (the reason audited), never ``failed``; a fresh approval is refused and no
    mail is sent again."""
    w = world
    doc = _signed(w)
    slot = asyncio.run(_lose_the_mails_answers(w, doc))
    if how == "aged":
        with w.db.tx() as c:
            c.execute(
                text(
                    "UPDATE idempotency_keys SET sent_at = sent_at - interval '8 days', "
                    "created_at = created_at - interval '8 days', "
                    "updated_at = updated_at - interval '8 days' WHERE key LIKE :k"
                ),
                {"k": f"{doc['plan']['plan_id']}:%"},
            )

    async def go() -> dict[int, str]:
        async with w.client() as client:
            wid = await _workflow_id(client, _mail_workflow(w, doc)[0])
            page, _ = await client.executions_page(workflow_id=wid)
            assert len(page) == len(MAIL_STEPS)
            for e in page:
                await client.delete_execution(e["id"])
            transport = N8nTransport(client)
            await _n8n_goes_on(client)  # newer executions: n8n goes on
            settled = await w.executor(transport).reconcile(
                doc, user_id=ALICE, settle_after_s=0, scan=SAME_CLOCK
            )
            with pytest.raises(OutcomeUnknownError):
                await w.executor(transport).execute(
                    doc, user_id=ALICE, tokens=_approve(w, doc, slot)
                )
            return settled

    assert asyncio.run(go()) == {7: "unknown", 8: "unknown"}
    assert {_key_state(w, doc, s) for s in MAIL_STEPS} == {"unknown"}
    assert (w.mails_to(ALICE), w.mails_to(BOB)) == (1, 1)
    reasons = _unsettled_reasons(w, doc)
    assert len(reasons) == 2
    expected = "are gone" if how == "deleted" else "longer ago than n8n keeps"
    assert all(expected in r for r in reasons), reasons


def test_key_n8n_never_ran_is_failed_only_when_records_cover_the_send(world: World) -> None:
    """An ``unknown`` key whose request never produced an n8n execution: while no execution
    after the send shows that n8n's records reach past it, it stays ``unknown``; once one does
    (and every execution id between the send's neighbours is held), it is ``failed`` — it may
    be sent again with a new approval."""
    w = world
    doc = _signed(w)
    args = {"never": "sent"}
    key = idempotency_key(doc["plan"]["plan_id"], 5, args)
    ledger = IdempotencyLedger(w.db, clock=system_clock, audit=AuditLog(clock=system_clock))

    async def go() -> tuple[dict[int, str], dict[int, str]]:
        async with w.client() as client:
            transport = N8nTransport(client)
            await _n8n_goes_on(client)  # executions before the send
            ledger.claim(key, content_hash(args), owner="t")
            ledger.mark_sent(key, owner="t")
            ledger.mark_unknown(key, "ReadTimeout", owner="t")
            executor = w.executor(transport)
            before = await executor.reconcile(doc, user_id=ALICE, settle_after_s=0, scan=SAME_CLOCK)
            await _n8n_goes_on(client)  # executions after it
            after = await executor.reconcile(doc, user_id=ALICE, settle_after_s=0, scan=SAME_CLOCK)
            return before, after

    before, after = asyncio.run(go())
    assert before == {5: "unknown"}
    assert _unsettled_reasons(w, doc) == ["n8n holds no execution from after the send settled yet"]
    assert after == {5: "failed"}
    assert (ledger.state(key) or {})["state"] == "failed"
