"""The visa watcher on Temporal's time-skipping test server: 7 simulated days in seconds.

Real Postgres (ledgers, approvals, audit), a sandbox slot service on loopback (labelled sandbox:
no consulate can be reached from here), a real SMTP peer (aiosmtpd). Variants: approved with a
valid token (booked once, mailed), rejected, expired token, cancel mid-watch, reconfigure, budget
exhausted; every run replays from its recorded history.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.message import EmailMessage
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import CancelledError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment

from countersign.approvals import Approvals, TokenExpiredError, token_hash
from countersign.audit import AuditLog
from countersign.durable import (
    TASK_QUEUE,
    ApproveGate,
    DurableActivities,
    PlanExecutionWorkflow,
    Reconfigure,
    RejectGate,
    ResolveStep,
    WatcherWorkflow,
    WatchInput,
    approval_for,
    make_worker,
    replayer,
)
from countersign.durable.testing import (  # noqa: F401  (fixture)
    sandbox_activities,
    sandbox_fixture,
    time_skipping_worker,
    until,
)
from countersign.kernel import ApprovalToken, Intent, Plan, Policy, SignedPlan, system_clock
from countersign.planner import make_plan
from countersign.planner.testing import signed_plan
from countersign.registry import Registry
from countersign.sandbox import SmtpSink, VisaSandbox
from countersign.signer import KeyRing
from countersign.storage import Database, PlanStore


def _now_utc() -> str:
    from datetime import UTC as _UTC
    from datetime import datetime as _dt

    return _dt.now(_UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


HISTORIES = Path(__file__).parent / "histories"
LOCAL = Policy(providers={"calendar": "caldav", "mail": "smtp", "chat": "slack"})
_ids = iter(range(1, 10_000))


def result_plan_id(db: Database) -> str:
    """The one plan this test stored."""
    with db.tx() as c:
        return str(c.execute(text("SELECT plan_id FROM plans")).scalar_one())


def _signed(registry: Registry, keyring: KeyRing) -> dict[str, Any]:
    n = next(_ids)
    intent = Intent.model_validate(
        {
            "intent": "watch_visa_slots",
            "intent_id": f"01JDQ3Z00000000000000{n:05d}",
            "received_at": _now_utc(),  # a plan is valid for its TTL from here
            "user_id": "alice@example.com",
            "entities": {
                "consulate": "lisbon",
                "date_from": "2027-03-01T00:00:00Z",
                "date_to": "2027-03-31T00:00:00Z",
                "notify_to": "alice@example.com",
            },
        }
    )
    plan = make_plan(intent, [], registry, LOCAL)
    assert isinstance(plan, Plan)
    assert [(s.step, s.role, s.mode) for s in plan.graph] == [
        (1, "Watcher", "durable"),
        (2, "Resolver", "durable"),
        (3, "Booker", "durable"),
        (4, "Notifier", "durable"),
    ]
    return signed_plan(plan, keyring)


@dataclass
class Run:
    env: WorkflowEnvironment
    handle: WorkflowHandle[Any, Any]
    doc: dict[str, Any]


async def _start(
    env: WorkflowEnvironment, doc: dict[str, Any], **kw: Any
) -> WorkflowHandle[Any, Any]:
    inp = WatchInput(
        signed=doc,
        user_id="alice@example.com",
        watch_step=1,
        gate_id="gate-A",
        book_step=3,
        notify_step=4,
        poll_interval_s=3600,
        continue_every=40,
        **kw,
    )
    return await env.client.start_workflow(
        WatcherWorkflow.run, inp, id=f"watch-{doc['plan']['plan_id']}", task_queue=TASK_QUEUE
    )


async def _until(
    env: WorkflowEnvironment,
    handle: WorkflowHandle[Any, Any],
    status: str,
    *,
    step_h: int = 6,
    max_days: int = 40,
) -> Any:
    for _ in range(max_days * 24 // step_h):
        wid = handle.id
        st = await env.client.get_workflow_handle_for(WatcherWorkflow.run, wid).query(
            WatcherWorkflow.status
        )
        if st is not None and st.status == status:
            return st
        await env.sleep(timedelta(hours=step_h))
    raise AssertionError(f"never reached {status}")


def _scenario(
    db: Database,
    registry: Registry,
    keyring: KeyRing,
    sandbox: VisaSandbox,
    smtp: SmtpSink,
    body: Any,
) -> Any:
    acts = sandbox_activities(db, keys=keyring, registry=registry, sandbox=sandbox, smtp=smtp)

    async def go() -> Any:
        async with time_skipping_worker(acts) as env:
            return await body(env, _signed(registry, keyring))

    return asyncio.run(go())


def _token(db: Database, doc: dict[str, Any], **kw: Any) -> str:
    return _issued(db, doc, **kw).token


def _approval(
    db: Database, doc: dict[str, Any], registry: Registry, token: str | None = None
) -> ApproveGate:
    """Spend a token (``_token``'s by default) where it arrives, as the API does; the update
    that tells the run (the spent token's hash, never the token)."""
    signed = SignedPlan.model_validate(doc)
    return approval_for(
        Approvals(db, clock=system_clock),
        token or _token(db, doc),
        plan=signed.plan,
        plan_hash=signed.plan_hash,
        gate_id="gate-A",
        user_id="alice@example.com",
        registry=registry,
    )


def _issued(db: Database, doc: dict[str, Any], **kw: Any) -> ApprovalToken:
    args: dict[str, Any] = {
        "plan_id": doc["plan"]["plan_id"],
        "plan_hash": doc["plan_hash"],
        "gate_id": "gate-A",
        "user_id": "alice@example.com",
        "scopes": ["mail.send", "visa.book"],
        "ttl_s": 300,
        "choice": {"slot": {"id": "slot-1"}},
    }
    args.update(kw)
    return Approvals(db, clock=system_clock).issue(**args)


async def _replay(env: WorkflowEnvironment, wid: str, save_as: str | None = None) -> None:
    history = await env.client.get_workflow_handle(wid).fetch_history()
    await replayer().replay_workflow(history)
    if save_as and os.environ.get("COUNTERSIGN_UPDATE_HISTORIES") == "1":
        HISTORIES.mkdir(exist_ok=True)
        (HISTORIES / save_as).write_text(
            json.dumps({"workflow_id": wid, "history": history.to_json_dict()}, indent=1)
        )


@pytest.mark.slow
def test_seven_days_then_slot_approved_booked_once(
    db: Database, registry: Registry, keyring: KeyRing, sandbox: VisaSandbox, smtp_server: SmtpSink
) -> None:
    sandbox.appear_after = 7 * 24  # hourly polls: the slot shows up on day 7
    smtp_server.messages.clear()

    async def body(env: WorkflowEnvironment, doc: dict[str, Any]) -> Any:
        handle = await _start(env, doc)
        st = await _until(env, handle, "waiting_approval")
        assert st.polls == 7 * 24 and st.found == {"id": "slot-1", "at": "2027-03-14T09:00:00Z"}
        latest = env.client.get_workflow_handle_for(WatcherWorkflow.run, handle.id)
        with pytest.raises(WorkflowUpdateFailedError):  # a wrong gate is refused by the validator
            await latest.execute_update(
                WatcherWorkflow.approve_gate, ApproveGate(gate_id="gate-B", approval="0" * 64)
            )
        assert (
            await latest.execute_update(WatcherWorkflow.approve_gate, _approval(db, doc, registry))
            == "approved"
        )
        result = await latest.result()
        # recorded with local-verify-finish-v1; watcher_booked_finish_v1.json is the same run
        # from before it (verify_plan / finish_plan as activity tasks) and stays as it is
        await _replay(env, handle.id, "watcher_booked_local_v1.json")
        return result

    result = _scenario(db, registry, keyring, sandbox, smtp_server, body)
    assert result.status == "booked" and result.booking_id == "booking-1" and result.notified
    assert result.polls == 7 * 24
    assert len(sandbox.bookings) == 1
    (mail,) = smtp_server.to("alice@example.com")
    # the confirmation a mail client shows: dated, and saying which appointment was booked
    assert parsedate_to_datetime(str(mail["Date"])).tzinfo is not None
    assert isinstance(mail, EmailMessage)
    lines = mail.get_content().splitlines()
    assert lines[0] == "Your appointment was booked." and "id: booking-1" in lines
    assert "slot.id: slot-1" in lines, lines
    with db.tx() as c:
        assert AuditLog(clock=system_clock).verify(c).ok
        kinds = [r.kind for r in c.execute(text("SELECT kind FROM audit_log ORDER BY seq"))]
    assert kinds.count("gate_approved") == 1 and kinds.count("step_finished") == 2
    assert kinds.count("durable_finished") == 1
    # progress is reported where interactive execution reports it: the plan store
    stored = PlanStore(db, clock=system_clock).get(result_plan_id(db))
    assert stored is not None and stored["status"] == "completed"
    steps = {r["step"]: r for r in stored["steps"]}
    assert steps[3]["status"] == "done" and steps[3]["output"]["id"] == "booking-1"
    assert steps[4]["status"] == "done"


def test_rejected_gate_books_nothing(
    db: Database, registry: Registry, keyring: KeyRing, sandbox: VisaSandbox, smtp_server: SmtpSink
) -> None:
    sandbox.appear_after = 3
    smtp_server.messages.clear()

    async def body(env: WorkflowEnvironment, doc: dict[str, Any]) -> Any:
        handle = await _start(env, doc)
        await _until(env, handle, "waiting_approval", step_h=1)
        latest = env.client.get_workflow_handle_for(WatcherWorkflow.run, handle.id)
        token = _token(db, doc)  # issued before the rejection
        with pytest.raises(WorkflowUpdateFailedError):  # malformed: refused, nothing recorded
            await latest.execute_update("approve_gate", {"gate_id": "gate-A", "token": "short"})
        with pytest.raises(WorkflowUpdateFailedError):
            await latest.execute_update("reject_gate", {"gate": "gate-A"})
        try:
            said = await latest.execute_update(
                WatcherWorkflow.reject_gate, RejectGate(gate_id="gate-A", reason="too early")
            )
            assert said == "rejected"
        except RPCError as e:
            # the run now ends in the workflow task that completes the update (finish_plan is a
            # local activity): the time-skipping test server then answers NOT_FOUND for the
            # update's outcome (sdk-python#826; a real server returns it); the result says it
            assert e.status == RPCStatusCode.NOT_FOUND
        # decided once: refused by the validator, or by the server once the run has ended
        with pytest.raises((WorkflowUpdateFailedError, RPCError)):
            await latest.execute_update(
                WatcherWorkflow.approve_gate,
                ApproveGate(gate_id="gate-A", approval=token_hash(token)),
            )
        result = await latest.result()
        await _replay(env, handle.id)
        return result

    result = _scenario(db, registry, keyring, sandbox, smtp_server, body)
    assert result.status == "rejected" and sandbox.bookings == {}
    # no unsigned "watcher ended" mail (issue 10, hole 9): the outcome is the run's result,
    # its status query and the plan's audit; a signed end-notice step is the way to mail it
    assert smtp_server.to("alice@example.com") == [] and not result.notified


def test_expired_token_is_refused_then_cancel(
    db: Database, registry: Registry, keyring: KeyRing, sandbox: VisaSandbox, smtp_server: SmtpSink
) -> None:
    sandbox.appear_after = 2

    async def body(env: WorkflowEnvironment, doc: dict[str, Any]) -> Any:
        handle = await _start(env, doc)
        await _until(env, handle, "waiting_approval", step_h=1)
        latest = env.client.get_workflow_handle_for(WatcherWorkflow.run, handle.id)
        issued = _issued(db, doc, ttl_s=1)
        token = issued.token
        # the ledger's clock is the real one: wait until it has passed the token's expiry
        await until(lambda: system_clock() > issued.exp, timeout=5, what="the token expired")
        # refused where the token arrives (audited), so nothing reaches the run
        with pytest.raises(TokenExpiredError):
            _approval(db, doc, registry, token)
        # and a token sent to the run itself is refused before it is recorded: tokens never
        # enter a workflow's history
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await latest.execute_update(
                WatcherWorkflow.approve_gate, ApproveGate(gate_id="gate-A", token=token)
            )
        assert "redeemed where they arrive" in str(refused.value.cause)
        history = await latest.fetch_history()
        assert token.encode() not in history.to_json().encode()
        st = await latest.query(WatcherWorkflow.status)
        assert (
            st is not None and st.status == "waiting_approval"
        )  # still waiting for a valid approval
        await _cancel_ends_canceled(latest)
        return doc

    doc = _scenario(db, registry, keyring, sandbox, smtp_server, body)
    assert _finished(db, doc) == ["cancelled"] and sandbox.bookings == {}
    with db.tx() as c:
        reasons = [
            r.reason
            for r in c.execute(text("SELECT reason FROM audit_log WHERE kind = 'token_refused'"))
        ]
    assert reasons == ["token_expired"]


def test_cancel_mid_watch_and_reconfigure(
    db: Database, registry: Registry, keyring: KeyRing, sandbox: VisaSandbox, smtp_server: SmtpSink
) -> None:
    async def body(env: WorkflowEnvironment, doc: dict[str, Any]) -> Any:
        handle = await _start(env, doc)
        await env.sleep(timedelta(hours=5))
        latest = env.client.get_workflow_handle_for(WatcherWorkflow.run, handle.id)
        await latest.signal(WatcherWorkflow.reconfigure, Reconfigure(poll_interval_s=600))
        await env.sleep(timedelta(hours=1))
        st = await latest.query(WatcherWorkflow.status)
        # the interval changed; the signed window did not (changing it is a new plan revision)
        assert st is not None and st.poll_interval_s == 600
        assert not {"date_from", "date_to"} & st.model_dump().keys()  # nothing to change
        await _cancel_ends_canceled(latest)
        await _replay(env, handle.id)
        return doc

    doc = _scenario(db, registry, keyring, sandbox, smtp_server, body)
    assert _finished(db, doc) == ["cancelled"] and sandbox.bookings == {}
    assert set(sandbox.windows) == {("2027-03-01T00:00:00Z", "2027-03-31T00:00:00Z")}


def test_retired_cancel_signal_changes_nothing(
    db: Database, registry: Registry, keyring: KeyRing, sandbox: VisaSandbox, smtp_server: SmtpSink
) -> None:
    """The ``cancel`` signal ended a run COMPLETED; Temporal's cancellation is now the one cancel
    path, so the signal is ignored (logged) and the watcher keeps polling. The golden history
    ``watcher_cancel_signal_v1.json``, where the signal stopped a run, still replays."""

    async def body(env: WorkflowEnvironment, doc: dict[str, Any]) -> Any:
        handle = await _start(env, doc)
        await env.sleep(timedelta(hours=2))
        latest = env.client.get_workflow_handle_for(WatcherWorkflow.run, handle.id)
        await latest.signal(WatcherWorkflow.cancel)
        before = await latest.query(WatcherWorkflow.status)
        await env.sleep(timedelta(hours=3))
        after = await latest.query(WatcherWorkflow.status)
        assert before is not None and after is not None
        assert after.status == "watching" and after.polls >= before.polls + 2
        assert (await latest.describe()).status == WorkflowExecutionStatus.RUNNING
        await _cancel_ends_canceled(latest)
        await _replay(env, handle.id, "watcher_cancelled_signal_retired_v1.json")
        return doc

    doc = _scenario(db, registry, keyring, sandbox, smtp_server, body)
    assert _finished(db, doc) == ["cancelled"]
    wf_type, patches, _ = _golden_facts("watcher_cancel_signal_v1.json")
    events = json.loads((HISTORIES / "watcher_cancel_signal_v1.json").read_text())["history"]
    signals = [
        e["workflowExecutionSignaledEventAttributes"]["signalName"]
        for e in events["events"]
        if "workflowExecutionSignaledEventAttributes" in e
    ]
    assert wf_type == "WatcherWorkflow" and signals == ["reconfigure", "cancel"]
    assert "cancel-signal-retired-v1" not in patches
    assert events["events"][-1]["eventType"] == "EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED"


async def _cancel_ends_canceled(handle: WorkflowHandle[Any, Any]) -> None:
    """Temporal's cancellation (what the API, the chat and the UI request): the run ends CANCELED."""
    await handle.cancel()
    with pytest.raises(WorkflowFailureError) as ended:
        await handle.result()
    assert isinstance(ended.value.cause, CancelledError)
    assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED


def _finished(db: Database, doc: dict[str, Any]) -> list[str]:
    """The ``durable_finished`` outcomes recorded for the plan."""
    with db.tx() as c:
        rows = c.execute(
            text(
                "SELECT status FROM audit_log WHERE plan_id = :p AND kind = 'durable_finished' "
                "ORDER BY seq"
            ),
            {"p": doc["plan"]["plan_id"]},
        ).all()
    return [str(r[0]) for r in rows]


@pytest.mark.parametrize("when", ["waiting", "at once"])
def test_temporal_cancellation_records_the_outcome_and_ends_canceled(
    db: Database,
    registry: Registry,
    keyring: KeyRing,
    sandbox: VisaSandbox,
    smtp_server: SmtpSink,
    when: str,
) -> None:
    """The Temporal UI's "Request Cancellation" (or the API's cancel) ends the run CANCELED, and
    the plan's log says so (``durable_finished`` cancelled) — before, the run ended with nothing
    recorded and the plan kept its old status."""

    async def body(env: WorkflowEnvironment, doc: dict[str, Any]) -> Any:
        handle = await _start(env, doc)
        if when == "waiting":
            await env.sleep(timedelta(hours=3))
        await handle.cancel()  # "at once": while its first activity (verify) is in flight
        with pytest.raises(WorkflowFailureError) as ended:
            await handle.result()
        assert isinstance(ended.value.cause, CancelledError)
        desc = await handle.describe()
        assert desc.status == WorkflowExecutionStatus.CANCELED
        await _replay(env, handle.id)
        return doc

    doc = _scenario(db, registry, keyring, sandbox, smtp_server, body)
    with db.tx() as c:
        rows = c.execute(
            text(
                "SELECT kind, status FROM audit_log WHERE plan_id = :p AND kind = 'durable_finished'"
            ),
            {"p": doc["plan"]["plan_id"]},
        ).all()
    assert [tuple(r) for r in rows] == [("durable_finished", "cancelled")]
    assert sandbox.bookings == {}


def test_budget_exhausted(
    db: Database, registry: Registry, keyring: KeyRing, sandbox: VisaSandbox, smtp_server: SmtpSink
) -> None:
    smtp_server.messages.clear()

    async def body(env: WorkflowEnvironment, doc: dict[str, Any]) -> Any:
        handle = await _start(env, doc, max_polls=5)
        await _until(env, handle, "done", step_h=1)
        result = await env.client.get_workflow_handle_for(WatcherWorkflow.run, handle.id).result()
        # one run from its start: verify_plan and finish_plan as local activities
        await _replay(env, handle.id, "watcher_budget_local_v1.json")
        return result

    result = _scenario(db, registry, keyring, sandbox, smtp_server, body)
    assert result.status == "budget_exhausted" and result.polls == 5 and sandbox.searches == 5
    # the plan signed one mail, "booked"; an end notice would be an unsigned mail: none is sent
    assert len(smtp_server.to("alice@example.com")) == 0 and not result.notified


@pytest.mark.parametrize("name", sorted(p.name for p in HISTORIES.glob("*.json")))
def test_golden_histories_replay(name: str) -> None:
    from temporalio.client import WorkflowHistory

    doc = json.loads((HISTORIES / name).read_text())
    history = WorkflowHistory.from_json(doc["workflow_id"], doc["history"])
    asyncio.run(replayer().replay_workflow(history))


def _golden_facts(name: str) -> tuple[str, list[str], list[list[str]]]:
    """A golden history's workflow type, its patch markers, and the activities each workflow task
    scheduled."""
    wf_type, patches, by_task, _ = _golden_markers(name)
    return wf_type, patches, by_task


def _golden_markers(name: str) -> tuple[str, list[str], list[list[str]], list[str]]:
    """``_golden_facts`` and the local activities the history's markers record, in order."""
    events = json.loads((HISTORIES / name).read_text())["history"]["events"]
    wf_type = events[0]["workflowExecutionStartedEventAttributes"]["workflowType"]["name"]
    patches: list[str] = []
    local: list[str] = []
    by_task: dict[str, list[str]] = {}
    for e in events:
        if marker := e.get("markerRecordedEventAttributes"):
            details = marker["details"]
            key = "patch-data" if marker["markerName"] == "core_patch" else "data"
            data = json.loads(base64.b64decode(details[key]["payloads"][0]["data"]))
            if marker["markerName"] == "core_patch":
                patches.append(data["id"])
            else:
                local.append(data["activity_type"])
        if sched := e.get("activityTaskScheduledEventAttributes"):
            by_task.setdefault(sched["workflowTaskCompletedEventId"], []).append(
                sched["activityType"]["name"]
            )
    return wf_type, patches, list(by_task.values()), local


@pytest.mark.parametrize(
    ("name", "wf_type", "local"),
    [
        ("plan_parallel_local_v1.json", "PlanExecutionWorkflow", ["verify_plan", "finish_plan"]),
        ("watcher_budget_local_v1.json", "WatcherWorkflow", ["verify_plan", "finish_plan"]),
        # the last run after ContinueAsNew: no verify in it, the end is recorded locally
        ("watcher_booked_local_v1.json", "WatcherWorkflow", ["finish_plan"]),
    ],
)
def test_golden_histories_cover_local_verify_and_finish(
    name: str, wf_type: str, local: list[str]
) -> None:
    """Since ``local-verify-finish-v1`` verify_plan and finish_plan are local activities (a
    marker each, no activity task); the histories from before (activity tasks, no such patch)
    stay checked in and replay (``test_golden_histories_replay``)."""
    got_type, patches, by_task, got_local = _golden_markers(name)
    assert got_type == wf_type and "local-verify-finish-v1" in patches
    assert got_local == local
    scheduled = {a for task in by_task for a in task}
    assert not scheduled & {"verify_plan", "finish_plan"}
    for old in (
        "plan_parallel_one_scheduler_v1.json",
        "watcher_booked_finish_v1.json",
        "watcher_cancelled_signal_retired_v1.json",
    ):
        _, old_patches, old_tasks, old_local = _golden_markers(old)
        assert "local-verify-finish-v1" not in old_patches and not old_local
        assert "finish_plan" in {a for task in old_tasks for a in task}


@pytest.mark.parametrize(
    "name", ["plan_parallel_one_scheduler_v1.json", "plan_saga_one_scheduler_v1.json"]
)
def test_golden_histories_cover_the_one_scheduler_with_parallel_steps(name: str) -> None:
    """The plan interpreter's shared-scheduler path has checked-in histories (replayed above):
    recorded under ``one-scheduler-v1``, with two reads started in one workflow task."""
    wf_type, patches, by_task = _golden_facts(name)
    assert wf_type == "PlanExecutionWorkflow" and "one-scheduler-v1" in patches
    assert ["poll", "poll"] in by_task
    assert "one-scheduler-v1" not in _golden_facts("plan_completed_finish_v1.json")[1]


@pytest.mark.slow
def test_real_dev_server_restart_keeps_the_watcher(
    db: Database,
    registry: Registry,
    keyring: KeyRing,
    sandbox: VisaSandbox,
    smtp_server: SmtpSink,
    tmp_path: Path,
) -> None:
    """The real dev server (SQLite file): stop and start it under a running watcher; it goes on
    polling, and an approval sent afterwards books exactly once. Search attributes are registered."""
    from temporalio.common import SearchAttributeKey

    from countersign.durable import connect, start_watcher
    from countersign.durable.runtime import temporal_start, temporal_stop
    from countersign.durable.watcher import POLL_COUNT, WATCH_STATE
    from countersign.durable.worker import replayer
    from countersign.n8n import free_port

    port, ui = free_port(), free_port()
    folder = tmp_path / "temporal"
    settings = {
        "visa_base_url": sandbox.url,
        "smtp_host": smtp_server.host,
        "smtp_port": str(smtp_server.port),
        "smtp_from": "countersign@example.com",
    }
    acts = DurableActivities(db, keys=keyring, registry=registry, settings=settings)
    doc = _signed(registry, keyring)
    wid = f"watch-{doc['plan']['plan_id']}"
    temporal_start(folder, port=port, ui_port=ui)
    try:

        async def phase(body: Any) -> Any:
            client = await connect(f"127.0.0.1:{port}")
            async with make_worker(client, acts):
                return await body(client)

        async def first(client: Any) -> int:
            inp = WatchInput(
                signed=doc,
                user_id="alice@example.com",
                watch_step=1,
                gate_id="gate-A",
                book_step=3,
                notify_step=4,
                poll_interval_s=1,
                continue_every=5,
            )
            handle = await start_watcher(client, inp)
            again = await start_watcher(client, inp)  # a second start joins the same run
            assert again.result_run_id == handle.result_run_id
            desc = await handle.describe()
            assert (
                desc.typed_search_attributes.get(SearchAttributeKey.for_keyword("plan_id"))
                == doc["plan"]["plan_id"]
            )

            # how the watcher stands is searchable: state and poll count, upserted as it polls
            async def polled() -> Any:
                attrs = (await handle.describe()).typed_search_attributes
                return attrs if (attrs.get(POLL_COUNT) or 0) >= 1 else None

            attrs = await until(polled, timeout=30, every=0.2, what="poll_count upserted")
            st = await client.get_workflow_handle_for(WatcherWorkflow.run, wid).query(
                WatcherWorkflow.status
            )
            assert attrs.get(WATCH_STATE) == "watching"
            assert 1 <= (attrs.get(POLL_COUNT) or 0) <= st.polls

            async def listed() -> list[str]:
                return [
                    w.id
                    async for w in client.list_workflows(
                        f'watch_state = "watching" AND poll_count >= 1 AND plan_id = "{doc["plan"]["plan_id"]}"'
                    )
                ]

            assert await until(listed, timeout=10, every=0.2, what="the search finds it") == [wid]
            return int(st.polls)

        before = asyncio.run(phase(first))
        assert before >= 1
        temporal_stop(folder)
        temporal_start(folder, port=port, ui_port=ui)
        sandbox.appear_after = sandbox.searches + 3

        async def second(client: Any) -> Any:
            handle = client.get_workflow_handle_for(WatcherWorkflow.run, wid)
            st = await until(
                lambda: _status_if(handle, "waiting_approval"),
                timeout=20,
                every=0.2,
                what="waiting_approval after the restart",
            )
            assert st.polls > before
            await handle.execute_update(WatcherWorkflow.approve_gate, _approval(db, doc, registry))
            return await handle.result()

        result = asyncio.run(phase(second))
        assert result.status == "booked" and len(sandbox.bookings) == 1

        async def third(client: Any) -> Any:
            handle = client.get_workflow_handle(wid)
            attrs = (await handle.describe()).typed_search_attributes
            # the run that upserted its state replays deterministically
            await replayer().replay_workflow(await handle.fetch_history())
            return attrs.get(WATCH_STATE), attrs.get(POLL_COUNT)

        state, polls = asyncio.run(phase(third))
        assert state == "booked" and polls == result.polls
    finally:
        temporal_stop(folder)


def test_execute_hands_durable_plans_to_temporal_once(
    db: Database, registry: Registry, keyring: KeyRing, sandbox: VisaSandbox, smtp_server: SmtpSink
) -> None:
    """The ExecuteOrchestrator starts the plan's watcher (id from plan_id; a second execute joins
    it), spends no token itself, and the gate is then approved on the workflow."""
    from countersign.durable import durable_starter, watch_input_for
    from countersign.execute import Executor

    sandbox.appear_after = 2

    async def body(env: WorkflowEnvironment, doc: dict[str, Any]) -> Any:
        inp = watch_input_for(doc, "alice@example.com")
        assert (inp.watch_step, inp.gate_id, inp.book_step, inp.notify_step) == (1, "gate-A", 3, 4)
        executor = Executor(
            keys=keyring,
            registry=registry,
            transport=None,
            db=db,
            settings={},
            durable=durable_starter(env.client, search_attributes=False),
        )
        first = await executor.execute(doc, user_id="alice@example.com")
        second = await executor.execute(doc, user_id="alice@example.com")
        assert first.status == second.status == "handed_off"
        assert first.workflow_id == second.workflow_id == f"watch-{doc['plan']['plan_id']}"
        handle = env.client.get_workflow_handle_for(WatcherWorkflow.run, first.workflow_id)
        await _until(env, handle, "waiting_approval", step_h=1)
        # the plan's own budget came from the signed args (policy default: 900 s interval)
        st = await handle.query(WatcherWorkflow.status)
        assert st is not None and st.poll_interval_s == 900
        await handle.execute_update(WatcherWorkflow.approve_gate, _approval(db, doc, registry))
        return await handle.result()

    result = _scenario(db, registry, keyring, sandbox, smtp_server, body)
    assert result.status == "booked" and len(sandbox.bookings) == 1
    with db.tx() as c:
        assert (
            c.execute(text("SELECT count(*) FROM audit_log WHERE kind = 'handed_off'")).scalar()
            == 2
        )


@pytest.mark.slow
def test_worker_sigkill_and_approval_while_no_worker_runs(
    pg_url: str,
    db: Database,
    registry: Registry,
    sandbox: VisaSandbox,
    smtp_server: SmtpSink,
    tmp_path: Path,
) -> None:
    """Real dev server; the worker is the real `countersign temporal worker` process. It is
    SIGKILLed while the watcher waits for approval; the approval is sent while no worker runs and
    is applied when a new worker starts; the slot is booked exactly once."""
    import base64
    import signal
    import subprocess

    from countersign.durable import connect, payload_codec, start_watcher
    from countersign.durable.runtime import temporal_start, temporal_stop
    from countersign.n8n import free_port

    seed = os.urandom(32)
    ring = KeyRing.from_seed(
        seed,
        pubkey_id="ci-key",
        created_at=__import__("datetime").datetime.now(__import__("datetime").UTC),
    )
    doc = _signed(registry, ring)
    port, ui = free_port(), free_port()
    folder = tmp_path / "temporal"
    env = {k: v for k, v in os.environ.items() if not k.startswith("COUNTERSIGN_")}
    env.update(
        {
            "COUNTERSIGN_HOME": str(tmp_path / "home"),
            "DATABASE_URL": pg_url,
            "COUNTERSIGN_SIGNING_KEY": base64.b64encode(seed).decode(),
            "COUNTERSIGN_SIGNING_KEY_ID": "ci-key",
            "COUNTERSIGN_TEMPORAL_ADDRESS": f"127.0.0.1:{port}",
            "COUNTERSIGN_CONNECTOR_SETTINGS": json.dumps(
                {
                    "visa_base_url": sandbox.url,
                    "smtp_host": smtp_server.host,
                    "smtp_port": str(smtp_server.port),
                    "smtp_from": "countersign@example.com",
                }
            ),
        }
    )

    def worker() -> subprocess.Popen[bytes]:
        log = (tmp_path / "worker.log").open("ab")
        return subprocess.Popen(
            [sys.executable, "-m", "countersign.cli", "temporal", "worker"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    sandbox.appear_after = 2
    temporal_start(folder, port=port, ui_port=ui)
    first = worker()
    second: subprocess.Popen[bytes] | None = None
    try:

        async def go() -> Any:
            nonlocal second
            # the worker process seals with the payload key of its COUNTERSIGN_HOME: share it
            client = await connect(
                f"127.0.0.1:{port}", codec=payload_codec(tmp_path / "home" / "keys")
            )
            inp = WatchInput(
                signed=doc,
                user_id="alice@example.com",
                watch_step=1,
                gate_id="gate-A",
                book_step=3,
                notify_step=4,
                poll_interval_s=1,
            )
            handle = await start_watcher(client, inp)
            try:
                await until(lambda: _status_if(handle, "waiting_approval"), timeout=30)
            except AssertionError as e:
                raise AssertionError(
                    f"{e}: watcher never waited for approval: "
                    + (tmp_path / "worker.log").read_text()[-2000:]
                ) from e
            first.send_signal(signal.SIGKILL)
            first.wait(10)
            approval = asyncio.create_task(
                handle.execute_update(
                    WatcherWorkflow.approve_gate,
                    _approval(db, doc, registry),
                )
            )
            with pytest.raises(TimeoutError):  # nobody to run it yet: not answered within 2 s
                await asyncio.wait_for(asyncio.shield(approval), timeout=2)
            second = worker()
            assert await asyncio.wait_for(approval, 60) == "approved"
            return await asyncio.wait_for(handle.result(), 60)

        result = asyncio.run(go())
        assert result.status == "booked" and len(sandbox.bookings) == 1
    finally:
        for p in (first, second):
            if p is not None and p.poll() is None:
                p.kill()
        temporal_stop(folder)


def _signed_plan(registry: Registry, keyring: KeyRing, notify: bool = True) -> dict[str, Any]:
    n = next(_ids)
    ents: dict[str, Any] = {
        "consulates": ["lisbon", "porto"],
        "date_from": "2027-03-01T00:00:00Z",
        "date_to": "2027-03-31T00:00:00Z",
    }
    if notify:
        ents["notify_to"] = "alice@example.com"
    intent = Intent.model_validate(
        {
            "intent": "book_visa_slot",
            "intent_id": f"01JDQ3Z00000000000000{n:05d}",
            "received_at": _now_utc(),  # a plan is valid for its TTL from here
            "user_id": "alice@example.com",
            "entities": ents,
        }
    )
    return signed_plan(intent, keyring, registry, LOCAL)


def _plan_scenario(
    db: Database,
    registry: Registry,
    keyring: KeyRing,
    settings: dict[str, str],
    doc: dict[str, Any],
    body: Any,
) -> Any:
    acts = DurableActivities(db, keys=keyring, registry=registry, settings=settings)

    async def go() -> Any:
        async with time_skipping_worker(acts) as env:
            return await body(env)

    return asyncio.run(go())


async def _status_if(handle: Any, status: str) -> Any:
    """The watcher's status when it is ``status`` (None otherwise), for ``until``."""
    st = await handle.query(WatcherWorkflow.status)
    return st if st is not None and st.status == status else None


async def _plan_waiting(handle: Any) -> dict[str, str] | None:
    """The plan run's step statuses once a gate waits (None before), for ``until``."""
    st = await handle.query(PlanExecutionWorkflow.status)
    return dict(st) if "waiting_approval" in st.values() else None


async def _plan_until_waiting(env: WorkflowEnvironment, handle: Any) -> dict[str, str]:
    return await until(
        lambda: _plan_waiting(handle), timeout=10, every=0.05, what="the plan waits for its gate"
    )


def test_plan_interpreter_parallel_reads_gate_write_notify(
    db: Database, registry: Registry, keyring: KeyRing, sandbox: VisaSandbox, smtp_server: SmtpSink
) -> None:
    sandbox.appear_after = 0
    smtp_server.messages.clear()
    doc = _signed_plan(registry, keyring)
    settings = {
        "visa_base_url": sandbox.url,
        "smtp_host": smtp_server.host,
        "smtp_port": str(smtp_server.port),
        "smtp_from": "countersign@example.com",
    }

    async def body(env: WorkflowEnvironment) -> Any:
        from countersign.durable import durable_starter

        start = durable_starter(env.client, search_attributes=False)
        wid, kind = await start(doc, "alice@example.com")
        assert wid == f"plan-{doc['plan']['plan_id']}" and kind == "PlanExecutionWorkflow"
        assert await start(doc, "alice@example.com") == (wid, kind)  # joined, not started again
        handle = env.client.get_workflow_handle_for(PlanExecutionWorkflow.run, wid)
        st = await _plan_until_waiting(env, handle)
        assert st == {
            "1": "done",
            "2": "done",
            "3": "waiting_approval",
            "4": "pending",
            "5": "pending",
        }
        token = _token(
            db,
            doc,
            scopes=["mail.send", "visa.book"],
            choice={"consulate": "porto", "slot": {"id": "slot-1"}},
        )
        await handle.execute_update(
            PlanExecutionWorkflow.approve_gate, _approval(db, doc, registry, token)
        )
        result = await handle.result()
        # recorded on the shared scheduler (one-scheduler-v1) with local-verify-finish-v1;
        # plan_completed_finish_v1.json is the same run from before both (the wave loop) and
        # plan_parallel_one_scheduler_v1.json from before the local activities: both stay
        await _replay(env, wid, "plan_parallel_local_v1.json")
        return result

    result = _plan_scenario(db, registry, keyring, settings, doc, body)
    assert result.status == "completed" and set(result.steps.values()) == {"done"}
    assert sandbox.searches == 2 and len(sandbox.bookings) == 1
    assert next(iter(sandbox.bookings.values()))["slot"] == {"id": "slot-1"}
    assert len(smtp_server.to("alice@example.com")) == 1


def test_plan_saga_compensates_the_booking_when_the_mail_fails(
    db: Database, registry: Registry, keyring: KeyRing, sandbox: VisaSandbox
) -> None:
    from countersign.durable import start_plan
    from countersign.durable.models import PlanInput
    from countersign.n8n import free_port

    sandbox.appear_after = 0
    doc = _signed_plan(registry, keyring)
    closed = free_port()  # nothing listens: the SMTP connection is refused
    settings = {
        "visa_base_url": sandbox.url,
        "smtp_host": "127.0.0.1",
        "smtp_port": str(closed),
        "smtp_from": "countersign@example.com",
    }

    async def body(env: WorkflowEnvironment) -> Any:
        handle = await start_plan(
            env.client, PlanInput(signed=doc, user_id="alice@example.com"), search_attributes=False
        )
        await _plan_until_waiting(env, handle)
        token = _token(
            db,
            doc,
            scopes=["mail.send", "visa.book"],
            choice={"consulate": "lisbon", "slot": {"id": "slot-1"}},
        )
        await handle.execute_update(
            PlanExecutionWorkflow.approve_gate, _approval(db, doc, registry, token)
        )
        result = await handle.result()
        await _replay(env, handle.id, "plan_saga_one_scheduler_v1.json")
        return result

    result = _plan_scenario(db, registry, keyring, settings, doc, body)
    assert result.status == "failed" and result.failed_step == 5
    assert result.compensated == [4] and result.steps["4"] == "compensated"
    assert sandbox.cancelled == ["booking-1"]
    with db.tx() as c:
        kinds = [r.kind for r in c.execute(text("SELECT kind FROM audit_log ORDER BY seq"))]
    assert kinds.count("step_compensated") == 1
    stored = PlanStore(db, clock=system_clock).get(doc["plan"]["plan_id"])
    assert stored is not None and stored["status"] == "failed"
    assert {r["step"]: r["status"] for r in stored["steps"]}[4] == "compensated"


# ---- unknown outcomes: a person resolves the step; never a blind retry ------------------------


async def _until_unknown(handle: Any, query: Any) -> Any:
    async def unknown() -> Any:
        st = await handle.query(query)
        if st is not None and (
            getattr(st, "status", None) == "outcome_unknown"
            or (isinstance(st, dict) and "outcome_unknown" in st.values())
        ):
            return st
        return None

    return await until(unknown, timeout=30, what="the write reached outcome_unknown")


def test_watcher_unknown_booking_outcome_waits_for_a_person(
    db: Database, registry: Registry, keyring: KeyRing, sandbox: VisaSandbox, smtp_server: SmtpSink
) -> None:
    """The provider books, then answers 500: the outcome is unknown, so the watcher neither
    retries nor fails — it waits in ``outcome_unknown``; a person looks at the provider and
    resolves step 3 as completed; the booking is answered from the ledger (one POST in all), the
    mail goes out once, the reconciliation is audited."""
    sandbox.appear_after = 2
    sandbox.fail_after_booking = 1
    smtp_server.messages.clear()

    async def body(env: WorkflowEnvironment, doc: dict[str, Any]) -> Any:
        handle = await _start(env, doc)
        await _until(env, handle, "waiting_approval", step_h=1)
        latest = env.client.get_workflow_handle_for(WatcherWorkflow.run, handle.id)
        await latest.execute_update(WatcherWorkflow.approve_gate, _approval(db, doc, registry))
        st = await _until_unknown(latest, WatcherWorkflow.status)
        assert st.unknown_step == 3
        await env.sleep(timedelta(days=3))  # time passes: still no blind retry
        assert sandbox.booking_posts == 1 and len(sandbox.bookings) == 1
        with pytest.raises(WorkflowUpdateFailedError):  # only the unknown step can be resolved
            await latest.execute_update(
                WatcherWorkflow.resolve_step, ResolveStep(step=4, outcome="completed")
            )
        booking = next(iter(sandbox.bookings.values()))
        assert (
            await latest.execute_update(
                WatcherWorkflow.resolve_step,
                ResolveStep(step=3, outcome="completed", result={"id": booking["id"]}),
            )
            == "completed"
        )
        result = await latest.result()
        await _replay(env, handle.id, "watcher_outcome_unknown_resolved.json")
        return result

    result = _scenario(db, registry, keyring, sandbox, smtp_server, body)
    assert result.status == "booked" and result.booking_id == "booking-1" and result.notified
    assert sandbox.booking_posts == 1 and len(sandbox.bookings) == 1
    assert len(smtp_server.to("alice@example.com")) == 1
    with db.tx() as c:
        assert AuditLog(clock=system_clock).verify(c).ok
        kinds = [r.kind for r in c.execute(text("SELECT kind FROM audit_log ORDER BY seq"))]
    assert kinds.count("idempotency_reconciled") == 1


def test_plan_unknown_write_resolved_as_failed_is_sent_again_once(
    db: Database, registry: Registry, keyring: KeyRing, sandbox: VisaSandbox, smtp_server: SmtpSink
) -> None:
    """The provider answers 503 to the booking (nothing happened, but we cannot know): step 4
    waits in ``outcome_unknown``; the person says it did not happen; the booking is sent again
    under the same idempotency key and the plan completes with one booking."""
    from countersign.durable import start_plan
    from countersign.durable.models import PlanInput

    sandbox.appear_after = 0
    sandbox.fail_before_booking = 1
    smtp_server.messages.clear()
    doc = _signed_plan(registry, keyring)
    settings = {
        "visa_base_url": sandbox.url,
        "smtp_host": smtp_server.host,
        "smtp_port": str(smtp_server.port),
        "smtp_from": "countersign@example.com",
    }

    async def body(env: WorkflowEnvironment) -> Any:
        handle = await start_plan(
            env.client, PlanInput(signed=doc, user_id="alice@example.com"), search_attributes=False
        )
        await _plan_until_waiting(env, handle)
        token = _token(
            db,
            doc,
            scopes=["mail.send", "visa.book"],
            choice={"consulate": "lisbon", "slot": {"id": "slot-1"}},
        )
        await handle.execute_update(
            PlanExecutionWorkflow.approve_gate, _approval(db, doc, registry, token)
        )
        st = await _until_unknown(handle, PlanExecutionWorkflow.status)
        assert st["4"] == "outcome_unknown" and st["5"] == "pending"
        assert sandbox.booking_posts == 1 and sandbox.bookings == {}
        await handle.execute_update(
            PlanExecutionWorkflow.resolve_step, ResolveStep(step=4, outcome="failed")
        )
        with pytest.raises(WorkflowUpdateFailedError):  # decided once
            await handle.execute_update(
                PlanExecutionWorkflow.resolve_step, ResolveStep(step=4, outcome="failed")
            )
        result = await handle.result()
        await _replay(env, handle.id)
        return result

    result = _plan_scenario(db, registry, keyring, settings, doc, body)
    assert result.status == "completed" and set(result.steps.values()) == {"done"}
    assert sandbox.booking_posts == 2 and len(sandbox.bookings) == 1
    assert len(smtp_server.to("alice@example.com")) == 1


@pytest.mark.slow
def test_worker_sigkill_mid_write_effect_happens_once(
    pg_url: str,
    db: Database,
    registry: Registry,
    sandbox: VisaSandbox,
    smtp_server: SmtpSink,
    tmp_path: Path,
) -> None:
    """Real dev server, the real `countersign temporal worker` process, SIGKILLed while the booking
    POST is in flight (the provider has booked; the answer never arrives). A new worker takes the
    activity over: the ledger says the request was sent, so the step waits in
    ``outcome_unknown`` — no second POST; a person resolves it from the provider's view; the mail
    goes out; one booking, one mail."""
    import base64
    import signal
    import subprocess

    from countersign.durable import connect, payload_codec, start_watcher
    from countersign.durable.runtime import temporal_start, temporal_stop
    from countersign.n8n import free_port

    seed = os.urandom(32)
    ring = KeyRing.from_seed(
        seed,
        pubkey_id="ci-key",
        created_at=__import__("datetime").datetime.now(__import__("datetime").UTC),
    )
    doc = _signed(registry, ring)
    port, ui = free_port(), free_port()
    folder = tmp_path / "temporal"
    env = {k: v for k, v in os.environ.items() if not k.startswith("COUNTERSIGN_")}
    env.update(
        {
            "COUNTERSIGN_HOME": str(tmp_path / "home"),
            "DATABASE_URL": pg_url,
            "COUNTERSIGN_SIGNING_KEY": base64.b64encode(seed).decode(),
            "COUNTERSIGN_SIGNING_KEY_ID": "ci-key",
            "COUNTERSIGN_TEMPORAL_ADDRESS": f"127.0.0.1:{port}",
            "COUNTERSIGN_CONNECTOR_SETTINGS": json.dumps(
                {
                    "visa_base_url": sandbox.url,
                    "smtp_host": smtp_server.host,
                    "smtp_port": str(smtp_server.port),
                    "smtp_from": "countersign@example.com",
                }
            ),
        }
    )

    def worker() -> subprocess.Popen[bytes]:
        log = (tmp_path / "worker.log").open("ab")
        return subprocess.Popen(
            [sys.executable, "-m", "countersign.cli", "temporal", "worker"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    sandbox.appear_after = 2
    sandbox.hold = True
    smtp_server.messages.clear()
    temporal_start(folder, port=port, ui_port=ui)
    first = worker()
    second: subprocess.Popen[bytes] | None = None
    try:

        async def go() -> Any:
            nonlocal second
            # the worker process seals with the payload key of its COUNTERSIGN_HOME: share it
            client = await connect(
                f"127.0.0.1:{port}", codec=payload_codec(tmp_path / "home" / "keys")
            )
            inp = WatchInput(
                signed=doc,
                user_id="alice@example.com",
                watch_step=1,
                gate_id="gate-A",
                book_step=3,
                notify_step=4,
                poll_interval_s=1,
                activity_timeout_s=3,
            )
            handle = await start_watcher(client, inp)
            try:
                await until(lambda: _status_if(handle, "waiting_approval"), timeout=30)
            except AssertionError as e:
                raise AssertionError((tmp_path / "worker.log").read_text()[-2000:]) from e
            await handle.execute_update(WatcherWorkflow.approve_gate, _approval(db, doc, registry))
            assert await asyncio.to_thread(sandbox.post_seen.wait, 30)
            first.send_signal(signal.SIGKILL)  # the booking is made; its answer is in flight
            first.wait(10)
            sandbox.release.set()
            sandbox.hold = False
            second = worker()
            st = await _until_unknown(handle, WatcherWorkflow.status)
            assert st.unknown_step == 3
            assert sandbox.booking_posts == 1 and len(sandbox.bookings) == 1
            booking = next(iter(sandbox.bookings.values()))
            await handle.execute_update(
                WatcherWorkflow.resolve_step,
                ResolveStep(step=3, outcome="completed", result={"id": booking["id"]}),
            )
            return await asyncio.wait_for(handle.result(), 60)

        result = asyncio.run(go())
        assert result.status == "booked" and result.booking_id == "booking-1"
        assert sandbox.booking_posts == 1 and len(sandbox.bookings) == 1
        assert len(smtp_server.to("alice@example.com")) == 1
    finally:
        for p in (first, second):
            if p is not None and p.poll() is None:
                p.kill()
        temporal_stop(folder)


def test_bad_signature_fails_the_run_before_any_step(
    db: Database, registry: Registry, keyring: KeyRing, sandbox: VisaSandbox, smtp_server: SmtpSink
) -> None:
    """A plan changed after signing: the run fails non-retryably at the first activity, the
    refusal is audited, the provider is never called."""
    from temporalio.client import WorkflowFailureError
    from temporalio.exceptions import ActivityError, ApplicationError

    sandbox.appear_after = 1

    async def body(env: WorkflowEnvironment, doc: dict[str, Any]) -> Any:
        doc["plan"]["graph"][0]["args"]["consulate"] = "porto"  # tampered
        handle = await _start(env, doc)
        with pytest.raises(WorkflowFailureError) as err:
            await handle.result()
        cause = err.value.cause
        # verify_plan is a local activity (local-verify-finish-v1): its failure reaches the run
        # as the activity's ApplicationError itself (a scheduled activity's came wrapped)
        app = cause.cause if isinstance(cause, ActivityError) else cause
        assert isinstance(app, ApplicationError)
        assert app.type == "signature_hash_mismatch" and app.non_retryable
        await _replay(env, handle.id)

    _scenario(db, registry, keyring, sandbox, smtp_server, body)
    assert sandbox.searches == 0 and sandbox.booking_posts == 0
    with db.tx() as c:
        refused = c.execute(
            text("SELECT reason FROM audit_log WHERE kind = 'signature_refused'")
        ).all()
    assert [r.reason for r in refused] == ["signature_hash_mismatch"]


@pytest.mark.slow
def test_search_attributes_registered_on_a_bare_server_find_the_run(
    registry: Registry, keyring: KeyRing, tmp_path: Path
) -> None:
    """A server without our search attributes refuses a start that sets them; after
    ``register_search_attributes`` (idempotent) the run starts and a person finds it by plan_id."""
    from temporalio.service import RPCError

    from countersign.durable import (
        connect,
        payload_codec,
        register_search_attributes,
        start_watcher,
    )
    from countersign.durable.runtime import temporal_start, temporal_stop
    from countersign.n8n import free_port

    port, ui = free_port(), free_port()
    folder = tmp_path / "temporal"
    doc = _signed(registry, keyring)
    inp = WatchInput(
        signed=doc, user_id="alice@example.com", watch_step=1, gate_id="gate-A", book_step=3
    )
    temporal_start(folder, port=port, ui_port=ui, search_attributes=False)
    try:

        async def go() -> list[str]:
            codec = payload_codec(tmp_path / "keys")
            client = await connect(f"127.0.0.1:{port}", codec=codec)
            opaque = codec.opaque_user("alice@example.com")
            with pytest.raises(RPCError):
                await start_watcher(client, inp)
            assert sorted(await register_search_attributes(client)) == [
                "intent",
                "plan_id",
                "poll_count",
                "user_id",
                "watch_state",
            ]
            assert await register_search_attributes(client) == []
            handle = await start_watcher(client, inp)

            async def listed() -> list[str]:
                return [
                    w.id
                    async for w in client.list_workflows(
                        f"plan_id = '{doc['plan']['plan_id']}' AND user_id = '{opaque}'"
                    )
                ]

            found = await until(listed, timeout=10, every=0.2, what="the search finds it")
            # what the UI shows of it: a summary that says what is watched and how often, and
            # details without the signature or any token
            described = await handle.describe()
            summary = await described.static_summary() or ""
            details = await described.static_details() or ""
            # the person by opaque id, as the search attribute: never the address
            assert summary.startswith(f"Watcher · {opaque} · visa.sandbox.find_slots")
            assert "alice@example.com" not in summary + details
            assert "every 15 min" in summary, summary
            assert doc["plan"]["plan_id"] in details and "gate-A" in details
            assert doc["signature"]["signature"] not in details + summary
            await handle.terminate("test over")
            return found

        assert asyncio.run(go()) == [f"watch-{doc['plan']['plan_id']}"]
    finally:
        temporal_stop(folder)


def test_worker_refuses_a_plan_signed_against_another_registry_or_expired(
    db: Database, registry: Registry, keyring: KeyRing, tmp_path: Path
) -> None:
    """Every activity verifies first: a plan signed before a registry edit, or past its TTL, is
    refused (non-retryable, audited) before any provider call (issue 10, hole 4)."""
    from datetime import UTC, datetime

    from temporalio.exceptions import ApplicationError
    from temporalio.testing import ActivityEnvironment

    from countersign.kernel import source_registry_dir
    from countersign.registry import load_registry

    doc = _signed(registry, keyring)
    folder = tmp_path / "registry"
    shutil.copytree(source_registry_dir(), folder)
    visa = folder / "connectors" / "visa.sandbox.yaml"
    visa.write_text(visa.read_text() + "\n# edited after signing\n")
    text_before = visa.read_text()
    visa.write_text(text_before.replace("description:", "description: (moved)", 1))
    edited = load_registry(folder)
    assert edited.version != registry.version
    env = ActivityEnvironment()
    for acts, code in (
        (DurableActivities(db, keys=keyring, registry=edited, settings={}), "registry_changed"),
        (
            DurableActivities(
                db,
                keys=keyring,
                registry=registry,
                settings={},
                clock=lambda: datetime(2100, 1, 1, tzinfo=UTC),
            ),
            "plan_expired",
        ),
    ):
        with pytest.raises(ApplicationError) as info:
            env.run(acts.verify_plan, SignedPlan.model_validate(doc))
        assert info.value.type == code and info.value.non_retryable
    with db.tx() as c:
        rows = c.execute(
            text("SELECT reason FROM audit_log WHERE kind = 'plan_refused' ORDER BY seq")
        ).scalars()
        assert list(rows) == ["registry_changed", "plan_expired"]


def test_worker_follows_registry_edits_made_through_the_api(
    db: Database, registry: Registry, keyring: KeyRing
) -> None:
    """A registry edit through the API (``RegistryStore.put``) gives a new registry version; a
    worker started before it runs a plan signed after it without a restart (it reads the
    effective registry again when a plan names another version), and still refuses a plan
    signed before the edit, as the API does. Without a source it would refuse the new plan."""
    import yaml
    from temporalio.exceptions import ApplicationError
    from temporalio.testing import ActivityEnvironment

    from countersign.audit import AuditLog
    from countersign.kernel import source_registry_dir, system_clock
    from countersign.registry.store import RegistryStore

    store = RegistryStore(db, source_registry_dir(), AuditLog(clock=system_clock), system_clock)
    before = _signed(registry, keyring)
    doc = yaml.safe_load((source_registry_dir() / "connectors" / "visa.sandbox.yaml").read_text())
    doc["description"] = "Visa appointments (edited through the API)"
    edited = store.put("connectors", "visa.sandbox", doc, author="admin@example.com")
    assert edited.version != registry.version
    after = _signed(edited, keyring)
    env = ActivityEnvironment()
    follows = DurableActivities(
        db, keys=keyring, registry=registry, settings={}, registry_source=store.current
    )
    assert env.run(follows.verify_plan, SignedPlan.model_validate(after)) is not None
    assert follows.registry.version == edited.version
    stays = DurableActivities(db, keys=keyring, registry=registry, settings={})
    for acts, signed in ((follows, before), (stays, after)):
        with pytest.raises(ApplicationError) as info:
            env.run(acts.verify_plan, SignedPlan.model_validate(signed))
        assert info.value.type == "registry_changed" and info.value.non_retryable


@pytest.mark.parametrize(
    ("activity_name", "step", "override"),
    [
        ("poll", 1, {"date_from": "2027-04-01T00:00:00Z"}),
        ("poll", 1, {"consulate": "berlin"}),
        ("poll", 1, {"extra": 1}),
        ("write_step", 4, {"subject": "Watcher ended", "body": "anything"}),
        ("write_step", 4, {"to": "mallory@example.com"}),
    ],
)
def test_activities_run_only_signed_arguments(
    db: Database,
    registry: Registry,
    keyring: KeyRing,
    sandbox: VisaSandbox,
    activity_name: str,
    step: int,
    override: dict[str, Any],
) -> None:
    """Whatever a workflow (or a forged history) passes as an override: an argument the plan did
    not sign is refused before any provider call, and audited (issue 10, hole 9)."""
    from temporalio.exceptions import ApplicationError
    from temporalio.testing import ActivityEnvironment

    from countersign.durable import StepCall

    doc = _signed(registry, keyring)
    acts = DurableActivities(
        db,
        keys=keyring,
        registry=registry,
        settings={
            "visa_base_url": sandbox.url,
            "smtp_from": "cs@example.com",
            "smtp_host": "127.0.0.1",
            "smtp_port": "1",
        },
    )
    call = StepCall(
        signed=doc,
        user_id="alice@example.com",
        step=step,
        args_override=override,
        gate_id="gate-A",
        choice={"id": "slot-1"},
    )
    searches = sandbox.searches
    with pytest.raises(ApplicationError) as info:
        ActivityEnvironment().run(getattr(acts, activity_name), call)
    assert info.value.type == "unsigned_change" and info.value.non_retryable
    assert sandbox.searches == searches and sandbox.bookings == {}
    with db.tx() as c:
        kinds = list(c.execute(text("SELECT kind FROM audit_log ORDER BY seq")).scalars())
    assert "unsigned_change_refused" in kinds


def test_verify_plan_stores_the_plan_with_its_plan_signed_row_once(
    db: Database, registry: Registry, keyring: KeyRing
) -> None:
    """The durable path stores a plan the way preview and execute do: with one plan_signed row,
    in the same transaction, however often a workflow verifies it (issue 10, hole 12)."""
    from temporalio.testing import ActivityEnvironment

    doc = _signed(registry, keyring)
    acts = DurableActivities(db, keys=keyring, registry=registry, settings={})
    for _ in range(3):
        ActivityEnvironment().run(acts.verify_plan, SignedPlan.model_validate(doc))
    with db.tx() as c:
        rows = c.execute(
            text("SELECT actor, details FROM audit_log WHERE kind = 'plan_signed'")
        ).all()
    assert len(rows) == 1 and rows[0].details["plan_hash"] == doc["plan_hash"]


# ---- what a person sees in the Temporal UI (issue 14) -------------------------------------------


@contextlib.asynccontextmanager
async def _dev_server_worker(folder: Path, acts: DurableActivities) -> AsyncIterator[Client]:
    """A real dev server (the one the UI reads) with search attributes, and a worker on it."""
    from countersign.durable import connect
    from countersign.durable.runtime import temporal_start, temporal_stop
    from countersign.n8n import free_port

    port, ui = free_port(), free_port()
    temporal_start(folder, port=port, ui_port=ui)
    try:
        client = await connect(f"127.0.0.1:{port}")
        async with make_worker(client, acts):
            yield client
    finally:
        temporal_stop(folder)


async def _current_details(handle: WorkflowHandle[Any, Any]) -> str:
    """The run's current details, read the way the UI reads them (the SDK's metadata query)."""
    meta = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    return str(meta.current_details)


async def _labels(handle: WorkflowHandle[Any, Any]) -> tuple[list[str], list[str]]:
    """The summaries of the run's activities (local ones too) and timers, in history order."""
    history = await handle.fetch_history()
    acts: list[str] = []
    timers: list[str] = []
    for e in history.events:
        text_of = json.loads(e.user_metadata.summary.data) if e.user_metadata.summary.data else ""
        local = e.marker_recorded_event_attributes.marker_name == "core_local_activity"
        if e.HasField("activity_task_scheduled_event_attributes") or local:
            acts.append(text_of)  # a local activity: its marker carries the summary
        elif e.HasField("timer_started_event_attributes"):
            timers.append(text_of)
    return acts, timers


def _utc(at: datetime | None) -> str:
    assert at is not None
    return at.strftime("%Y-%m-%d %H:%M:%S UTC")


@pytest.mark.slow
def test_the_temporal_ui_shows_what_a_watcher_does_on_a_dev_server(
    db: Database,
    registry: Registry,
    keyring: KeyRing,
    sandbox: VisaSandbox,
    smtp_server: SmtpSink,
    tmp_path: Path,
) -> None:
    """The labels the Temporal UI shows, read back from a real dev server: the static summary and
    details set at start, the current details as the watcher waits, finds and books, and the
    summaries on every activity and timer of its history — the exact texts."""
    from countersign.durable import start_watcher

    sandbox.appear_after = 2
    doc = _signed(registry, keyring)
    pid = doc["plan"]["plan_id"]
    acts = sandbox_activities(
        db, keys=keyring, registry=registry, sandbox=sandbox, smtp=smtp_server
    )
    inp = WatchInput(
        signed=doc,
        user_id="alice@example.com",
        watch_step=1,
        gate_id="gate-A",
        book_step=3,
        notify_step=4,
        poll_interval_s=3600,
    )

    async def status(handle: WorkflowHandle[Any, Any], polls: int, state: str) -> Any:
        async def reached() -> Any:
            st = await handle.query(WatcherWorkflow.status)
            return st if st is not None and st.polls == polls and st.status == state else None

        return await until(
            reached, timeout=60, every=0.2, what=f"the watcher in {state} after {polls} polls"
        )

    async def go() -> None:
        async with _dev_server_worker(tmp_path / "temporal", acts) as client:
            handle = await start_watcher(client, inp)
            described = await handle.describe()
            assert await described.static_summary() == (
                "Watcher · visa.sandbox.find_slots · lisbon · 2027-03-01 · 2027-03-31 · hourly"
            )
            assert await described.static_details() == (
                f"**Plan** `{pid}` · intent `watch_visa_slots` · hash `{doc['plan_hash'][:12]}…`"
                "\n\n**Watches** step 1 hourly, at most 2000 polls within 720 h"
                "\n\n**When found** gate-A asks the person; on approval step 3 "
                "`visa.sandbox.book_slot` runs, then step 4 mails"
                "\n\n**Cancel** from the chat card, `countersign cancel <plan_id>` or "
                "`POST /v1/plans/<plan_id>/cancel`"
            )
            # after the first poll: nothing found, the next poll an hour away
            st = await status(handle, 1, "watching")
            assert await _current_details(handle) == (
                f"**watching** · polls 1 · last {_utc(st.last_poll_at)} · "
                f"next {_utc(st.next_poll_at)}"
            )
            # a shorter interval wakes it: the second poll finds the slot
            await handle.signal(WatcherWorkflow.reconfigure, Reconfigure(poll_interval_s=60))
            st = await status(handle, 2, "waiting_approval")
            found = "{'id': 'slot-1', 'at': '2027-03-14T09:00:00Z'}"
            assert await _current_details(handle) == (
                f"**waiting_approval** · polls 2 · last {_utc(st.last_poll_at)} · next — · "
                f"found `{found}`"
            )
            await handle.execute_update(WatcherWorkflow.approve_gate, _approval(db, doc, registry))
            result = await handle.result()
            assert result.status == "booked"
            assert await _current_details(handle) == (
                f"**booked** · polls 2 · last {_utc(st.last_poll_at)} · next — · found `{found}`"
            )
            activities, timers = await _labels(handle)
            assert activities == [
                "verify the signed plan",
                "poll 1: step 1",
                "poll 2: step 1",
                "gate-A: confirm the person's approval",
                "write step 3 (visa.sandbox.book_slot) · approved at gate-A",
                "write step 4 (smtp.send) · approved at gate-A",
                "record the outcome: booked",
            ]
            assert timers == ["next poll (hourly)", "gate-A: waiting for the person's decision"]

    asyncio.run(go())
    assert len(sandbox.bookings) == 1


@pytest.mark.slow
def test_the_temporal_ui_shows_what_a_plan_run_does_on_a_dev_server(
    db: Database,
    registry: Registry,
    keyring: KeyRing,
    sandbox: VisaSandbox,
    smtp_server: SmtpSink,
    tmp_path: Path,
) -> None:
    """The plan interpreter gets the watcher's treatment: static summary and details (its steps,
    the gate each write waits for), current details naming the gate it waits on and how it
    ended, and a summary on every activity and on the gate's timer — read back from a real dev
    server, exact texts."""
    from countersign.durable import start_plan
    from countersign.durable.models import PlanInput

    sandbox.appear_after = 0
    doc = _signed_plan(registry, keyring)
    pid = doc["plan"]["plan_id"]
    acts = sandbox_activities(
        db, keys=keyring, registry=registry, sandbox=sandbox, smtp=smtp_server
    )

    async def go() -> None:
        async with _dev_server_worker(tmp_path / "temporal", acts) as client:
            handle = await start_plan(client, PlanInput(signed=doc, user_id="alice@example.com"))
            described = await handle.describe()
            assert await described.static_summary() == (
                "Plan · book_visa_slot · 5 steps · 1 gate"  # no codec: no opaque id, no owner
            )
            assert await described.static_details() == (
                f"**Plan** `{pid}` · intent `book_visa_slot` · hash `{doc['plan_hash'][:12]}…`"
                "\n\n**Steps**"
                "\n1. read `visa.sandbox.find_slots`"
                "\n2. read `visa.sandbox.find_slots`"
                "\n3. gate `gate-A` — the person decides after 1, 2"
                "\n4. write `visa.sandbox.book_slot` after 3"
                "\n5. write `smtp.send` after 4"
                "\n\n**Cancel** from the chat card, `countersign cancel <plan_id>` or "
                "`POST /v1/plans/<plan_id>/cancel`"
            )
            await until(lambda: _plan_waiting(handle), timeout=60, every=0.2)
            assert await _current_details(handle) == (
                "**waiting_approval** · done 2/5 · waiting gate-A (step 3)"
            )
            token = _token(
                db,
                doc,
                scopes=["mail.send", "visa.book"],
                choice={"consulate": "porto", "slot": {"id": "slot-1"}},
            )
            await handle.execute_update(
                PlanExecutionWorkflow.approve_gate, _approval(db, doc, registry, token)
            )
            assert (await handle.result()).status == "completed"
            assert await _current_details(handle) == "**completed** · done 5/5"
            activities, timers = await _labels(handle)
            assert activities == [
                "verify the signed plan",
                "read step 1 (visa.sandbox.find_slots)",
                "read step 2 (visa.sandbox.find_slots)",
                "gate-A: confirm the person's approval",
                "write step 4 (visa.sandbox.book_slot) · approved at gate-A",
                "write step 5 (smtp.send) · approved at gate-A",
                "record the outcome: completed",
            ]
            assert timers == ["gate-A (step 3): waiting for the person's decision"]

    asyncio.run(go())
    assert len(sandbox.bookings) == 1


# ---- poll errors back off (issue 14) -------------------------------------------------------------


@contextlib.contextmanager
def _failing_front(upstream: str, failures: int) -> Iterator[tuple[str, list[int]]]:
    """A real HTTP server in front of the sandbox visa service: its first ``failures`` requests
    are answered 503 (the provider is down), later ones are passed on. Yields its URL and the
    status of every request it answered."""
    import http.server
    import threading

    import httpx

    answered: list[int] = []

    class Front(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if len(answered) < failures:
                status, body = 503, b'{"error": "down for maintenance"}'
            else:
                r = httpx.get(upstream + self.path, timeout=10)
                status, body = r.status_code, r.content
            answered.append(status)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Front)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", answered
    finally:
        server.shutdown()
        server.server_close()


def test_poll_errors_back_off_and_count_as_polls(
    db: Database, registry: Registry, keyring: KeyRing, sandbox: VisaSandbox, smtp_server: SmtpSink
) -> None:
    """The provider is down for the first five polls (each poll's five attempts answered 503),
    then answers: the waits between polls double per poll error in a row — ×2, ×4, ×8, ×16, then
    capped at ×16 — and drop back to the interval after the first good poll (±10 % jitter each,
    read from the history's timers). Every poll counts toward the budget (8 polls: 5 failed, 3
    answered); only the answered ones reach the provider and the plan's log (``watcher_polled``),
    and the status query names the errors in a row."""
    failing_polls, attempts = 5, 5  # _POLL_RETRY.maximum_attempts

    async def body(env: WorkflowEnvironment, doc: dict[str, Any]) -> Any:
        handle = await _start(env, doc, max_polls=8)
        await _until(env, handle, "done", step_h=6, max_days=20)
        result = await handle.result()
        history = await handle.fetch_history()
        waits = [
            e.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta().total_seconds()
            for e in history.events
            if e.HasField("timer_started_event_attributes")
        ]
        await _replay(env, handle.id)
        return doc, result, waits

    with _failing_front(sandbox.url, failing_polls * attempts) as (url, answered):
        settings = {
            "visa_base_url": url,
            "smtp_host": smtp_server.host,
            "smtp_port": str(smtp_server.port),
            "smtp_from": "countersign@example.com",
        }
        acts = DurableActivities(db, keys=keyring, registry=registry, settings=settings)

        async def go() -> Any:
            async with time_skipping_worker(acts) as env:
                return await body(env, _signed(registry, keyring))

        doc, result, waits = asyncio.run(go())

    assert result.status == "budget_exhausted" and result.polls == 8
    # the wait after each poll, as a multiple of the hourly interval (jitter within ±10 %)
    factors = [w / 3600 for w in waits]
    expected = [2, 4, 8, 16, 16, 1, 1]  # no wait after the 8th poll: the budget is spent
    assert len(factors) == len(expected), factors
    for got, want in zip(factors, expected, strict=True):
        assert 0.9 * want <= got <= 1.1 * want, (factors, expected)
    assert answered == [503] * (failing_polls * attempts) + [200] * 3
    assert sandbox.searches == 3
    with db.tx() as c:
        polled = [
            str(r[0])
            for r in c.execute(
                text(
                    "SELECT status FROM audit_log WHERE plan_id = :p AND kind = 'watcher_polled' "
                    "ORDER BY seq"
                ),
                {"p": doc["plan"]["plan_id"]},
            )
        ]
    assert polled == ["nothing"] * 3
    assert _finished(db, doc) == ["budget_exhausted"]
