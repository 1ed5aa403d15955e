"""The watcher that holds what it found (issue 14): watch → hold the slot → mail a link to the card
(gate-A, approved when watching starts) → gate-B → book → mail; the hold is released when the
person rejects, does not decide in time, or cancels. Time-skipping server, real Postgres, the
sandbox slot service, a real SMTP peer."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowFailureError, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import CancelledError
from temporalio.testing import WorkflowEnvironment

from countersign.approvals import Approvals
from countersign.audit import AuditLog
from countersign.durable import (
    TASK_QUEUE,
    ApproveGate,
    RejectGate,
    WatcherWorkflow,
    approval_for,
    replayer,
    watch_input_for,
)
from countersign.durable.testing import (  # noqa: F401  (fixture)
    sandbox_activities,
    sandbox_fixture,
    time_skipping_worker,
    until,
)
from countersign.kernel import Intent, Policy, SignedPlan, system_clock
from countersign.planner.testing import signed_plan
from countersign.registry import Registry
from countersign.sandbox import SmtpSink, VisaSandbox
from countersign.sandbox.http import Answer
from countersign.signer import KeyRing
from countersign.storage import Database

LOCAL = Policy(
    providers={"calendar": "caldav", "mail": "smtp", "chat": "slack"},
    card_url="http://127.0.0.1:8000/plans/{plan_id}",
)
USER = "alice@example.com"
_ids = iter(range(1, 10_000))


def _signed(registry: Registry, keyring: KeyRing, **entities: Any) -> dict[str, Any]:
    from datetime import UTC, datetime

    n = next(_ids)
    intent = Intent.model_validate(
        {
            "intent": "watch_visa_slots",
            "intent_id": f"01JDQ3Z00000000000001{n:05d}",
            "received_at": datetime.now(UTC).replace(microsecond=0).isoformat(),
            "user_id": USER,
            "entities": {
                "consulate": "lisbon",
                "date_from": "2027-03-01T00:00:00Z",
                "date_to": "2027-03-31T00:00:00Z",
                "notify_to": USER,
                "hold": True,
                **entities,
            },
        }
    )
    return signed_plan(intent, keyring, registry, LOCAL)


def _approve(
    db: Database, doc: dict[str, Any], gate: str, choice: Any = None, *, spend: bool = True
) -> str:
    scopes = doc["plan"]["constraints"]["scopes"]  # what the API's tokens carry
    approvals = Approvals(db, clock=system_clock)
    token = approvals.issue(
        plan_id=doc["plan"]["plan_id"],
        plan_hash=doc["plan_hash"],
        gate_id=gate,
        user_id=USER,
        scopes=scopes,
        ttl_s=300,
        choice=choice,
    ).token
    if gate == "gate-A" and spend:  # what `execute` does with gate-A's token at hand-off
        approvals.redeem(
            token,
            plan_id=doc["plan"]["plan_id"],
            plan_hash=doc["plan_hash"],
            gate_id=gate,
            user_id=USER,
            required_scopes=scopes,
        )
    return token


async def _until(env: WorkflowEnvironment, handle: WorkflowHandle[Any, Any], status: str) -> Any:
    for _ in range(24 * 10):
        st = await env.client.get_workflow_handle_for(WatcherWorkflow.run, handle.id).query(
            WatcherWorkflow.status
        )
        if st is not None and st.status == status:
            return st
        await env.sleep(timedelta(hours=1))
    raise AssertionError(f"never reached {status}")


def _run(
    db: Database,
    registry: Registry,
    keyring: KeyRing,
    sandbox: VisaSandbox,
    smtp: SmtpSink,
    body: Any,
    *,
    approve_start: bool = True,
) -> Any:
    acts = sandbox_activities(db, keys=keyring, registry=registry, sandbox=sandbox, smtp=smtp)
    doc = _signed(registry, keyring)
    if approve_start:
        _approve(db, doc, "gate-A")

    async def go() -> Any:
        async with time_skipping_worker(acts) as env:
            inp = watch_input_for(doc, USER).model_copy(
                update={"poll_interval_s": 3600, "approval_timeout_s": 2 * 86400}
            )
            handle = await env.client.start_workflow(
                WatcherWorkflow.run,
                inp,
                id=f"watch-{doc['plan']['plan_id']}",
                task_queue=TASK_QUEUE,
            )
            out = await body(env, handle, doc)
            await replayer().replay_workflow(await handle.fetch_history())
            return out

    return asyncio.run(go())


def test_the_plan_and_its_watch_input(registry: Registry, keyring: KeyRing) -> None:
    doc = _signed(registry, keyring)
    graph = doc["plan"]["graph"]
    assert [(s["step"], s["call"], s["gate_id"]) for s in graph] == [
        (1, "find_slots", None),
        (2, "confirm", "gate-A"),
        (3, "hold_slot", None),
        (4, "send", None),
        (5, "confirm", "gate-B"),
        (6, "book_slot", None),
        (7, "send", None),
    ]
    assert graph[2]["args"]["slot_id"] == {"$ref": "steps.1.output.slots.0.id"}
    link = f"http://127.0.0.1:8000/plans/{doc['plan']['plan_id']}"
    assert graph[3]["args"]["body"].endswith(link)  # the card's link, signed in the plan
    inp = watch_input_for(doc, USER)
    assert (inp.start_gate_id, inp.hold_step, inp.notice_step) == ("gate-A", 3, 4)
    assert (inp.gate_id, inp.book_step, inp.notify_step) == ("gate-B", 6, 7)
    # without "hold", the plan is the one it always was (one gate, no hold)
    plain = _signed(registry, keyring, hold=False)
    assert [s["call"] for s in plain["plan"]["graph"]] == [
        "find_slots",
        "confirm",
        "book_slot",
        "send",
    ]
    assert watch_input_for(plain, USER).hold_step is None
    # with the registry the plan runs against, what a poll found is what the op declares it offers
    assert inp.offers is None
    declared = registry.op("visa.sandbox", "find_slots").offers
    assert declared is not None
    assert watch_input_for(doc, USER, registry=registry).offers == declared


@pytest.mark.slow
def test_found_held_noticed_then_approved_booked_once(
    db: Database, registry: Registry, keyring: KeyRing, sandbox: VisaSandbox, smtp_server: SmtpSink
) -> None:
    sandbox.appear_after = 30
    smtp_server.messages.clear()

    async def body(env: WorkflowEnvironment, handle: Any, doc: dict[str, Any]) -> Any:
        st = await _until(env, handle, "waiting_approval")
        held = st.held.get("output", st.held)
        assert st.found["id"] == "slot-1" and held["hold_id"]
        assert sandbox.holds == {"slot-1": held["hold_id"]}  # held while the person decides
        notice = smtp_server.to(USER)
        assert len(notice) == 1
        link = f"/plans/{doc['plan']['plan_id']}"
        body = notice[0].get_payload(decode=True)
        assert isinstance(body, bytes) and link in body.decode()
        latest = env.client.get_workflow_handle_for(WatcherWorkflow.run, handle.id)
        with pytest.raises(WorkflowUpdateFailedError):  # the booking gate is gate-B
            await latest.execute_update(
                WatcherWorkflow.approve_gate, ApproveGate(gate_id="gate-A", approval="0" * 64)
            )
        token = _approve(db, doc, "gate-B", {"slot": st.found})
        signed = SignedPlan.model_validate(doc)
        gate = approval_for(  # spent where it arrives, as the API does: the run gets its hash
            Approvals(db, clock=system_clock),
            token,
            plan=signed.plan,
            plan_hash=signed.plan_hash,
            gate_id="gate-B",
            user_id=USER,
            registry=registry,
        )
        await latest.execute_update(WatcherWorkflow.approve_gate, gate)
        return await latest.result()

    result = _run(db, registry, keyring, sandbox, smtp_server, body)
    assert result.status == "booked" and len(sandbox.bookings) == 1
    assert sandbox.hold_posts == 1 and sandbox.holds == {} and sandbox.released == []
    assert len(smtp_server.to(USER)) == 2  # the notice, then the confirmation
    with db.tx() as c:
        assert AuditLog(clock=system_clock).verify(c).ok


@pytest.mark.slow
@pytest.mark.parametrize("how", ["rejected", "approval_timeout", "cancelled"])
def test_the_hold_is_released_when_not_booked(
    how: str,
    db: Database,
    registry: Registry,
    keyring: KeyRing,
    sandbox: VisaSandbox,
    smtp_server: SmtpSink,
) -> None:
    sandbox.appear_after = 3

    async def body(env: WorkflowEnvironment, handle: Any, doc: dict[str, Any]) -> Any:
        await _until(env, handle, "waiting_approval")
        assert list(sandbox.holds) == ["slot-1"]
        latest = env.client.get_workflow_handle_for(WatcherWorkflow.run, handle.id)
        if how == "rejected":
            await latest.execute_update(
                WatcherWorkflow.reject_gate, RejectGate(gate_id="gate-B", reason="not that day")
            )
        elif how == "approval_timeout":
            await env.sleep(timedelta(days=3))
        else:
            await latest.cancel()
            with pytest.raises(WorkflowFailureError):
                await latest.result()
            return how
        return (await latest.result()).status

    assert _run(db, registry, keyring, sandbox, smtp_server, body) == how
    assert sandbox.released == ["slot-1"] and sandbox.holds == {} and not sandbox.bookings
    with db.tx() as c:
        rows = c.execute(
            text("SELECT count(*) FROM audit_log WHERE kind = 'step_compensated'")
        ).scalar_one()
    assert rows >= 1


@pytest.mark.slow
def test_a_slot_taken_before_the_hold_keeps_watching(
    db: Database, registry: Registry, keyring: KeyRing, sandbox: VisaSandbox, smtp_server: SmtpSink
) -> None:
    """Someone else holds the slot the search still shows: the hold is refused, the watcher keeps
    polling (no notice), and holds the next time the slot is free."""
    sandbox.appear_after = 2
    smtp_server.messages.clear()

    async def body(env: WorkflowEnvironment, handle: Any, doc: dict[str, Any]) -> Any:
        sandbox.holds["slot-1"] = "someone-else"
        real_search = sandbox._search

        def leaky(consulate: str, req: Any) -> Any:  # the search does not know about holds yet
            ans = real_search(consulate, req)
            if sandbox.holds.get("slot-1") == "someone-else":
                return Answer(200, {"slots": [{"id": "slot-1", "at": "2027-03-14T09:00:00Z"}]})
            return ans

        sandbox._search = leaky  # type: ignore[method-assign]
        await env.sleep(timedelta(hours=5))
        st = await env.client.get_workflow_handle_for(WatcherWorkflow.run, handle.id).query(
            WatcherWorkflow.status
        )
        assert st is not None
        assert st.status == "watching" and st.held is None and st.polls >= 3
        assert smtp_server.to(USER) == []
        sandbox.holds.pop("slot-1")
        st = await _until(env, handle, "waiting_approval")
        assert st.held is not None and list(sandbox.holds) == ["slot-1"]
        await env.client.get_workflow_handle(handle.id).cancel()
        return st.polls

    _run(db, registry, keyring, sandbox, smtp_server, body)
    assert len(smtp_server.to(USER)) == 1


@pytest.mark.slow
def test_without_gate_a_approved_nothing_is_held(
    db: Database, registry: Registry, keyring: KeyRing, sandbox: VisaSandbox, smtp_server: SmtpSink
) -> None:
    """gate-A guards the hold and the notice: a run started without its approval fails at once
    (``gate_not_approved``, audited) before any poll or hold."""
    sandbox.appear_after = 1

    async def body(env: WorkflowEnvironment, handle: Any, doc: dict[str, Any]) -> Any:
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        return doc["plan"]["plan_id"]

    plan_id = _run(db, registry, keyring, sandbox, smtp_server, body, approve_start=False)
    assert sandbox.searches == 0 and sandbox.hold_posts == 0
    with db.tx() as c:
        reasons = c.execute(
            text("SELECT reason FROM audit_log WHERE plan_id = :p AND kind = 'execute_refused'"),
            {"p": plan_id},
        ).scalars()
        assert "gate_not_approved" in list(reasons)


@pytest.mark.slow
def test_execute_spends_gate_a_then_hands_off(
    db: Database, registry: Registry, keyring: KeyRing, sandbox: VisaSandbox, smtp_server: SmtpSink
) -> None:
    """`execute` with gate-A's token (what 'Start watching' sends): the token is spent, the plan
    handed to Temporal, and the run holds what it finds; gate-B's token at execute is refused
    (the running workflow takes that decision)."""
    from countersign.durable import durable_starter
    from countersign.execute import ExecuteRefusedError, Executor

    sandbox.appear_after = 2
    acts = sandbox_activities(
        db, keys=keyring, registry=registry, sandbox=sandbox, smtp=smtp_server
    )
    doc = _signed(registry, keyring)

    def token(gate: str) -> str:
        return _approve(db, doc, gate, spend=False)

    async def go() -> Any:
        async with time_skipping_worker(acts) as env:
            ex = Executor(
                keys=keyring,
                registry=registry,
                transport=None,
                db=db,
                settings={},
                durable=durable_starter(env.client, search_attributes=False),
            )
            with pytest.raises(ExecuteRefusedError, match="gate-B is not approved when the run"):
                await ex.execute(doc, user_id=USER, tokens={"gate-B": token("gate-B")})
            report = await ex.execute(doc, user_id=USER, tokens={"gate-A": token("gate-A")})
            assert report.status == "handed_off"
            handle = env.client.get_workflow_handle(report.workflow_id or "")
            st = await _until(env, handle, "waiting_approval")
            await handle.cancel()
            with pytest.raises(WorkflowFailureError):  # ends CANCELED, the hold released
                await handle.result()
            return st

    st = asyncio.run(go())
    assert st.held is not None and sandbox.released == ["slot-1"]
    decision = Approvals(db, clock=system_clock).decision(doc["plan"]["plan_id"], "gate-A")
    assert decision is not None and decision.decision == "approved"


@contextlib.contextmanager
def _front_holding_back_holds(
    upstream: str,
) -> Iterator[tuple[str, threading.Event, threading.Event]]:
    """A real HTTP server in front of the sandbox visa service that passes every request on, but
    answers a hold only when told: the slot is held at the provider (``seen`` is set) while the
    answer waits for ``answer``. Yields its URL, ``seen`` and ``answer``."""
    seen, answer = threading.Event(), threading.Event()

    class Front(http.server.BaseHTTPRequestHandler):
        def _pass(self) -> None:
            size = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(size) if size else None
            keep = {"content-type", "idempotency-key", "accept"}
            headers = {k: v for k, v in self.headers.items() if k.lower() in keep}
            r = httpx.request(
                self.command, upstream + self.path, content=body, headers=headers, timeout=10
            )
            if self.command == "POST" and self.path.endswith("/hold"):
                seen.set()
                answer.wait(30)
            self.send_response(r.status_code)
            self.send_header("Content-Type", r.headers.get("content-type", "application/json"))
            self.send_header("Content-Length", str(len(r.content)))
            self.end_headers()
            self.wfile.write(r.content)

        def do_GET(self) -> None:
            self._pass()

        def do_POST(self) -> None:
            self._pass()

        def do_DELETE(self) -> None:
            self._pass()

        def log_message(self, *_: Any) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Front)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen, answer
    finally:
        answer.set()
        server.shutdown()
        server.server_close()


@pytest.mark.slow
def test_a_cancellation_while_the_hold_is_placed_still_releases_it(
    db: Database, registry: Registry, keyring: KeyRing, sandbox: VisaSandbox, smtp_server: SmtpSink
) -> None:
    """The run is cancelled while its hold request is in flight (the provider has held the slot,
    its answer not yet back): the run waits for the answer instead of abandoning the activity,
    then releases the hold and ends CANCELED (``hold-settles-before-cancel-v1``). Before, the run
    ended at once and the slot stayed held."""
    sandbox.appear_after = 1
    smtp_server.messages.clear()
    doc = _signed(registry, keyring)
    _approve(db, doc, "gate-A")

    async def processed_cancel(handle: WorkflowHandle[Any, Any]) -> None:
        """Until a workflow task has completed after the cancellation request (the workflow has
        seen it)."""

        async def seen() -> bool:
            kinds = [e.event_type for e in (await handle.fetch_history()).events]
            asked = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED
            return asked in kinds and (
                EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED in kinds[kinds.index(asked) :]
            )

        await until(seen, timeout=30, what="the workflow processed the cancellation")

    with _front_holding_back_holds(sandbox.url) as (url, seen, answer):
        acts = sandbox_activities(
            db, keys=keyring, registry=registry, sandbox=sandbox, smtp=smtp_server
        )
        acts.settings = {**acts.settings, "visa_base_url": url}

        async def go() -> Any:
            async with time_skipping_worker(acts) as env:
                inp = watch_input_for(doc, USER).model_copy(update={"poll_interval_s": 3600})
                handle = await env.client.start_workflow(
                    WatcherWorkflow.run,
                    inp,
                    id=f"watch-{doc['plan']['plan_id']}",
                    task_queue=TASK_QUEUE,
                )
                assert await asyncio.to_thread(seen.wait, 30), "the hold was never asked for"
                assert list(sandbox.holds) == ["slot-1"]  # held at the provider, answer pending
                await handle.cancel()
                await processed_cancel(handle)
                answer.set()
                with pytest.raises(WorkflowFailureError) as ended:
                    await handle.result()
                assert isinstance(ended.value.cause, CancelledError)
                await replayer().replay_workflow(await handle.fetch_history())

        asyncio.run(go())
    assert sandbox.released == ["slot-1"] and sandbox.holds == {} and not sandbox.bookings
    assert smtp_server.to(USER) == []  # no notice for a hold placed while cancelling
    with db.tx() as c:
        rows = c.execute(
            text("SELECT status FROM audit_log WHERE plan_id = :p AND kind = 'durable_finished'"),
            {"p": doc["plan"]["plan_id"]},
        ).scalars()
        assert list(rows) == ["cancelled"]
