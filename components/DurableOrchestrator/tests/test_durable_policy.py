"""The policy's gate rules again at a durable write (issue 26 §1): ``write_step`` refuses a write
the policy would gate but whose plan's gate does not name the rule — a plan signed with the gate's
reason dropped — before anything is held or sent; the refusal is audited, never retried, and the
run ends clearly (the watcher ``refused``, the plan interpreter ``failed`` with the step and
``policy_refused``). The durable check agrees with the interactive executor's
(``execute.policy.check_policy``) on the same plans and rules.

Real Postgres, the time-skipping test server, the sandbox visa service, a real SMTP peer.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from countersign.approvals import Approvals, token_hash
from countersign.binding import resolve_refs
from countersign.durable import (
    TASK_QUEUE,
    ApproveGate,
    PlanExecutionWorkflow,
    PlanInput,
    WatcherWorkflow,
    WatchInput,
    replayer,
)
from countersign.durable.policy import policy_refusal
from countersign.durable.testing import (  # noqa: F401  (fixture)
    sandbox_activities,
    sandbox_fixture,
    time_skipping_worker,
    until,
)
from countersign.execute import PolicyRefusedError
from countersign.execute.policy import check_policy
from countersign.kernel import DEFAULT_RULES, GateRule, Intent, Plan, Policy, system_clock
from countersign.planner import make_plan
from countersign.planner.testing import make_intent, signed_plan
from countersign.registry import Registry
from countersign.sandbox import SmtpSink, VisaSandbox
from countersign.signer import KeyRing
from countersign.steps import guarding_gate
from countersign.storage import Database, PlanStore

USER = "alice@example.com"
PROVIDERS = {"calendar": "caldav", "mail": "smtp", "chat": "slack"}
#: the policy in force (the worker's): the default rules
LOCAL = Policy(providers=PROVIDERS)
#: rules without "appointment": a plan made under them has gate-A without that reason
DROPPED = Policy(
    providers=PROVIDERS, rules=tuple(r for r in DEFAULT_RULES if r.id != "appointment")
)
_ids = iter(range(1, 10_000))


def _intent(name: str, entities: dict[str, Any]) -> Intent:
    from datetime import UTC, datetime

    now = datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    return Intent.model_validate(
        {
            "intent": name,
            "intent_id": f"01JDQ3Z00000000000009{next(_ids):05d}",
            "received_at": now,
            "user_id": USER,
            "entities": entities,
        }
    )


def _watch_doc(registry: Registry, keyring: KeyRing, policy: Policy) -> dict[str, Any]:
    intent = _intent(
        "watch_visa_slots",
        {
            "consulate": "lisbon",
            "date_from": "2027-03-01T00:00:00Z",
            "date_to": "2027-03-31T00:00:00Z",
            "notify_to": USER,
        },
    )
    return signed_plan(intent, keyring, registry, policy)


def _because(doc: dict[str, Any], gate: str) -> list[str]:
    step = next(s for s in doc["plan"]["graph"] if s.get("gate_id") == gate)
    return [b["rule"] for b in step["args"]["because"]]


def _approve(db: Database, doc: dict[str, Any], choice: Any, scopes: list[str]) -> ApproveGate:
    """The approval the API would send: a token issued and spent where it arrived."""
    approvals = Approvals(db, clock=system_clock)
    token = approvals.issue(
        plan_id=doc["plan"]["plan_id"],
        plan_hash=doc["plan_hash"],
        gate_id="gate-A",
        user_id=USER,
        scopes=scopes,
        ttl_s=300,
        choice=choice,
    ).token
    approvals.redeem(
        token,
        plan_id=doc["plan"]["plan_id"],
        plan_hash=doc["plan_hash"],
        gate_id="gate-A",
        user_id=USER,
    )
    return ApproveGate(gate_id="gate-A", approval=token_hash(token))


def _refusals(db: Database, plan_id: str) -> list[tuple[Any, ...]]:
    with db.tx() as c:
        rows = c.execute(
            text(
                "SELECT kind, reason, step, op FROM audit_log WHERE plan_id = :p "
                "AND reason = 'policy_refused' ORDER BY seq"
            ),
            {"p": plan_id},
        )
        return [tuple(r) for r in rows]


def _finished(db: Database, plan_id: str) -> list[tuple[Any, ...]]:
    with db.tx() as c:
        rows = c.execute(
            text(
                "SELECT status FROM audit_log WHERE plan_id = :p AND kind = 'durable_finished' "
                "ORDER BY seq"
            ),
            {"p": plan_id},
        )
        return [tuple(r) for r in rows]


async def _waiting(handle: WorkflowHandle[Any, Any]) -> Any:
    st = await handle.query(WatcherWorkflow.status)
    return st if st is not None and st.status == "waiting_approval" else None


def test_watcher_refuses_a_booking_whose_gate_dropped_the_rule(
    db: Database, registry: Registry, keyring: KeyRing, sandbox: VisaSandbox, smtp_server: SmtpSink
) -> None:
    """Signed under rules without "appointment": gate-A names only mail-send. The worker runs
    under the default rules: the booking is refused before it is sent, audited once, the run ends
    ``refused`` (no retry, nothing booked, no mail) and replays from its history."""
    sandbox.appear_after = 0
    smtp_server.messages.clear()
    doc = _watch_doc(registry, keyring, DROPPED)
    assert _because(doc, "gate-A") == ["mail-send"]
    acts = sandbox_activities(
        db, keys=keyring, registry=registry, sandbox=sandbox, smtp=smtp_server
    )
    assert acts.policy.rules == DEFAULT_RULES

    async def body(env: WorkflowEnvironment) -> Any:
        inp = WatchInput(
            signed=doc, user_id=USER, watch_step=1, gate_id="gate-A", book_step=3, notify_step=4
        )
        handle = await env.client.start_workflow(
            WatcherWorkflow.run, inp, id=f"watch-{doc['plan']['plan_id']}", task_queue=TASK_QUEUE
        )
        await until(lambda: _waiting(handle), timeout=20, what="the watcher found a slot")
        approval = _approve(db, doc, {"slot": {"id": "slot-1"}}, ["mail.send", "visa.book"])
        await handle.execute_update(WatcherWorkflow.approve_gate, approval)
        result = await handle.result()
        await replayer().replay_workflow(await handle.fetch_history())
        return result

    async def go() -> Any:
        async with time_skipping_worker(acts) as env:
            return await body(env)

    result = asyncio.run(go())
    plan_id = doc["plan"]["plan_id"]
    assert result.status == "refused" and result.booking_id is None and not result.notified
    assert sandbox.bookings == {} and smtp_server.to(USER) == []
    assert _refusals(db, plan_id) == [
        ("execute_refused", "policy_refused", 3, "visa.sandbox.book_slot")
    ]
    assert _finished(db, plan_id) == [("refused",)]
    stored = PlanStore(db, clock=system_clock).get(plan_id)
    assert stored is not None and stored["status"] == "failed"


def test_plan_interpreter_refuses_the_write_and_ends_failed_with_the_reason(
    db: Database, registry: Registry, keyring: KeyRing, sandbox: VisaSandbox, smtp_server: SmtpSink
) -> None:
    """The plan interpreter: the booking its gate does not name is refused (non-retryable, one
    audit row), the run ends ``failed`` at that step with ``policy_refused``; nothing booked."""
    sandbox.appear_after = 0
    smtp_server.messages.clear()
    intent = _intent(
        "book_visa_slot",
        {
            "consulates": ["lisbon", "porto"],
            "date_from": "2027-03-01T00:00:00Z",
            "date_to": "2027-03-31T00:00:00Z",
            "notify_to": USER,
        },
    )
    doc = signed_plan(intent, keyring, registry, DROPPED)
    assert "appointment" not in _because(doc, "gate-A")
    book = next(s["step"] for s in doc["plan"]["graph"] if s["call"] == "book_slot")
    acts = sandbox_activities(
        db, keys=keyring, registry=registry, sandbox=sandbox, smtp=smtp_server
    )

    async def body(env: WorkflowEnvironment) -> Any:
        handle = await env.client.start_workflow(
            PlanExecutionWorkflow.run,
            PlanInput.model_validate({"signed": doc, "user_id": USER}),
            id=f"plan-{doc['plan']['plan_id']}",
            task_queue=TASK_QUEUE,
        )

        async def waiting() -> Any:
            st = await handle.query(PlanExecutionWorkflow.status)
            return "waiting_approval" in st.values()

        await until(waiting, timeout=20, what="the plan waits for gate-A")
        choice = {"consulate": "porto", "slot": {"id": "slot-1"}}
        await handle.execute_update(
            PlanExecutionWorkflow.approve_gate,
            _approve(db, doc, choice, ["mail.send", "visa.book"]),
        )
        result = await handle.result()
        await replayer().replay_workflow(await handle.fetch_history())
        return result

    async def go() -> Any:
        async with time_skipping_worker(acts) as env:
            return await body(env)

    result = asyncio.run(go())
    plan_id = doc["plan"]["plan_id"]
    assert result.status == "failed" and result.failed_step == book
    assert result.failure == "policy_refused" and result.compensated == []
    assert sandbox.bookings == {} and smtp_server.to(USER) == []
    assert _refusals(db, plan_id) == [
        ("execute_refused", "policy_refused", book, "visa.sandbox.book_slot")
    ]
    assert _finished(db, plan_id) == [("failed",)]


def _rule(**kw: Any) -> GateRule:
    return GateRule.model_validate({"then": "gate", "because": "b", **kw})


def _writes(plan: Plan, registry: Registry) -> list[int]:
    return [s.step for s in plan.graph if registry.op(s.uses, s.call).safety == "write"]


_MEETING_CHOICE = {"start": "2026-11-23T22:00:00Z", "end": "2026-11-23T22:30:00Z"}
_NIGHT = _rule(
    id="no-night", op="*.create_event", then="deny", where={"start": {"matches": "*T22:*"}}
)


@pytest.mark.parametrize(
    ("made_under", "in_force"),
    [
        (Policy(), Policy()),
        (DROPPED, Policy()),
        (Policy(), Policy(rules=(*DEFAULT_RULES, _rule(id="night", op="*.create_event")))),
        (Policy(), Policy(rules=(*DEFAULT_RULES, _NIGHT))),
        (Policy(rules=(*DEFAULT_RULES, _NIGHT)), Policy(rules=(*DEFAULT_RULES, _NIGHT))),
        (Policy(rules=()), Policy()),
        (Policy(), Policy(rules=())),
    ],
)
@pytest.mark.parametrize("name", ["schedule_meeting", "watch_visa_slots", "purchase_item"])
def test_the_durable_check_agrees_with_the_interactive_one(
    registry: Registry, name: str, made_under: Policy, in_force: Policy
) -> None:
    """Write by write, the durable refusal (``policy_refusal`` on the arguments as sent) and the
    interactive executor's ``check_policy`` refuse the same writes for the same reason."""
    plan = make_plan(make_intent(name), [], registry, made_under)
    assert isinstance(plan, Plan), plan
    choices = {"gate-A": _MEETING_CHOICE} if name == "schedule_meeting" else {}
    for n in _writes(plan, registry):
        gate = guarding_gate(plan, n)
        if gate is None:
            continue
        step = plan.step(n)
        args = resolve_refs(step.args, {}, choices) if choices else dict(step.args)
        durable = policy_refusal(plan, step, args, in_force)
        try:
            check_policy(plan, gate, [n], {}, choices, policy=in_force, refused=lambda *a: None)
            interactive = None
        except PolicyRefusedError as e:
            interactive = str(e.message)
        expected = None if durable is None else f"plan {plan.plan_id}: {durable}"
        assert interactive == expected, (n, durable, interactive)


def test_the_worker_reads_the_deployment_policy_file(tmp_path: Path) -> None:
    """The ``worker`` command checks writes against the policy file the API reads
    (``COUNTERSIGN_POLICY_FILE``, YAML or JSON); the default rules without one; a broken file is
    named."""
    from countersign.durable.cli import worker_policy
    from countersign.kernel import InputError

    assert worker_policy(None).rules == DEFAULT_RULES
    strict = tmp_path / "policy.yaml"
    strict.write_text(
        "providers: {calendar: caldav}\n"
        "rules:\n"
        "  - {id: no-visa, op: 'visa.*', then: deny, because: no bookings here}\n"
    )
    assert [r.id for r in worker_policy(strict).rules] == ["no-visa"]
    broken = tmp_path / "policy.json"
    broken.write_text('{"rules": [{"id": "x"}]}')
    with pytest.raises(InputError, match=r"policy\.json"):
        worker_policy(broken)
    with pytest.raises(InputError, match="cannot read"):
        worker_policy(tmp_path / "missing.yaml")
