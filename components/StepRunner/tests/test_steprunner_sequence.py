"""The write-and-undo sequence (``steps.write_once`` / ``steps.undo_writes``, StepRunner SPEC
"Write protocol" and "Compensation") is one behaviour on both runtimes: the table below runs every
failure point through the n8n runtime (``N8nStepRunner`` over a stand-in for n8n) and the direct
runtime (``DirectSender`` over a stand-in for the provider), on the real ledger, and expects the
same outcome from each — what is raised, what reached the provider, the ledger state, the audit
rows and the plan step's statuses."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
import pytest
from ulid import ULID

from countersign.audit import AuditLog
from countersign.kernel import Plan, PlanStep, Policy, system_clock
from countersign.n8n import N8nUnavailableError
from countersign.planner import make_plan
from countersign.planner.testing import make_intent
from countersign.registry import Registry
from countersign.steps import (
    Attempt,
    DirectSender,
    N8nStepRunner,
    Replay,
    Write,
    WriteDone,
    WriteFailedError,
    WriteProtocol,
    WriteRuntime,
    compensation_step,
    compensation_steps,
    idempotency_key,
    undo_writes,
    write_once,
)
from countersign.storage import Database, IdempotencyLedger, OutcomeUnknownError
from countersign.workflowbuilder import StepWorkflow

LOCAL = Policy(providers={"calendar": "caldav", "mail": "smtp", "chat": "slack"})
SETTINGS = {"shop_base_url": "http://shop.test"}
BUY, ADD = 7, 4  # shop.sandbox.purchase (undone by cancel_order), add_to_cart (remove_from_cart)

#: what the provider (or the way to it) does with one request
Point = Literal["ok", "refused", "provider_5xx", "not_sent", "lost", "unbuilt", "claim_unknown"]


@pytest.fixture(scope="module")
def shopping(registry: Registry) -> Plan:
    plan = make_plan(
        make_intent(
            "purchase_item", entities={"query": "usb", "max_price": "15.00", "quantity": 1}
        ),
        [],
        registry,
        LOCAL,
    )
    assert isinstance(plan, Plan)
    assert (plan.step(BUY).call, plan.step(ADD).call) == ("purchase", "add_to_cart")
    return plan


# ---- the two runtimes, each over a stand-in that acts out a failure point -------------------------
class Provider:
    """Answers each op's requests as told (``points``: op call → failure point, else ``ok``) and
    counts the requests that reached it."""

    def __init__(self, points: Mapping[str, Point]) -> None:
        self.points = dict(points)
        self.arrived: list[str] = []

    def point(self, call: str) -> Point:
        return self.points.get(call, "ok")

    def answer(self, call: str) -> tuple[int, dict[str, Any]]:
        self.arrived.append(call)
        status = {"refused": 422, "provider_5xx": 503}.get(self.point(call), 201)
        return status, {"id": f"{call}-1", "cart_total": "9.90"}


class FakeN8n:
    """The n8n a step runner talks to: the provider's answer as the HTTP node's item, n8n's own
    failures as ``N8nClient`` raises them."""

    def __init__(self, provider: Provider) -> None:
        self.provider = provider
        self.calls: dict[str, str] = {}

    async def deploy(self, workflow: StepWorkflow) -> None:
        self.calls[workflow.path] = str(workflow.workflow["name"]).split()[2].rsplit(".", 1)[1]

    async def call(
        self, path: str, body: Mapping[str, Any], *, write: bool = False
    ) -> Mapping[str, Any]:
        call = self.calls[path]
        point = self.provider.point(call)
        if point == "not_sent":
            raise N8nUnavailableError("connect refused", sent=False)
        status, out = self.provider.answer(call)
        if point == "lost":
            raise N8nUnavailableError("read timeout", sent=True)
        return {"statusCode": status, "headers": {}, "body": out}

    async def call_batch(self, path: str, body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        raise AssertionError("writes are never batched")


def _direct_handler(provider: Provider) -> Callable[[httpx.Request], httpx.Response]:
    calls = {
        ("POST", "/checkout"): "purchase",
        ("POST", "/cart"): "add_to_cart",
        ("DELETE", "/cart"): "remove_from_cart",
        ("POST", "/orders"): "cancel_order",
    }

    def handle(request: httpx.Request) -> httpx.Response:
        root = "/" + request.url.path.strip("/").split("/")[0]
        call = calls[(request.method, root)]
        point = provider.point(call)
        if point == "not_sent":
            raise httpx.ConnectError("connect refused", request=request)
        status, out = provider.answer(call)
        if point == "lost":
            raise httpx.ReadTimeout("read timeout", request=request)
        return httpx.Response(status, content=json.dumps(out))

    return handle


def _runtime(
    kind: str, plan: Plan, registry: Registry, provider: Provider, settings: Mapping[str, str]
) -> WriteRuntime[Any]:
    if kind == "n8n":
        return N8nStepRunner(
            plan=plan,
            plan_hash="0" * 64,
            registry=registry,
            transport=FakeN8n(provider),
            settings=settings,
        )
    client = httpx.Client(transport=httpx.MockTransport(_direct_handler(provider)))
    return DirectSender(registry, settings, client=client)


# ---- the table ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One failure point of one sequence and what every runtime must make of it."""

    sequence: Literal["write", "replay", "undo"]
    point: Point
    #: ``write``: the error raised (its ``sent``), the ledger state, the audit rows, the marks
    raises: type[Exception] | None = None
    sent: bool | None = None
    ledger: str = "completed"
    audit: tuple[str, ...] = ("step_started", "step_finished")
    marks: tuple[str, ...] = ("running", "done")
    #: requests that reached the provider, by op call
    arrived: tuple[str, ...] = ("purchase",)
    #: ``undo``: each ``step_compensated`` row (step, status, reason) and the steps undone
    undone: tuple[tuple[int, str, str | None], ...] = field(default=())


TABLE = [
    Case("write", "ok"),
    Case("replay", "ok", marks=("running", "done", "done")),
    Case(
        "write",
        "refused",
        raises=WriteFailedError,
        sent=True,
        ledger="failed",
        audit=("step_started", "step_failed"),
        marks=("running", "failed"),
    ),
    Case(
        "write",
        "provider_5xx",
        raises=OutcomeUnknownError,
        ledger="unknown",
        audit=("step_started", "step_unknown"),
        marks=("running",),
    ),
    Case(
        "write",
        "not_sent",
        raises=WriteFailedError,
        sent=False,
        ledger="failed",
        audit=("step_started", "step_failed"),
        marks=("running", "failed"),
        arrived=(),
    ),
    Case(
        "write",
        "lost",
        raises=OutcomeUnknownError,
        ledger="unknown",
        audit=("step_started", "step_unknown"),
        marks=("running",),
    ),
    Case(
        "write",
        "unbuilt",
        raises=WriteFailedError,
        sent=False,
        ledger="failed",
        audit=("step_started", "step_failed"),
        marks=("running", "failed"),
        arrived=(),
    ),
    # the point hits the first undo (cancel the order); the second (remove the cart line) must run
    Case("undo", "ok", arrived=("cancel_order", "remove_from_cart"), undone=((BUY, "ok", None),)),
    Case(
        "undo",
        "refused",
        arrived=("cancel_order", "remove_from_cart"),
        undone=((BUY, "error", "write_failed"),),
    ),
    Case(
        "undo",
        "provider_5xx",
        arrived=("cancel_order", "remove_from_cart"),
        undone=((BUY, "unknown", "idempotency_outcome_unknown"),),
    ),
    Case(
        "undo",
        "not_sent",
        arrived=("remove_from_cart",),
        undone=((BUY, "error", "write_failed"),),
    ),
    Case(
        "undo",
        "lost",
        arrived=("cancel_order", "remove_from_cart"),
        undone=((BUY, "unknown", "idempotency_outcome_unknown"),),
    ),
    Case(
        "undo",
        "unbuilt",
        arrived=("remove_from_cart",),
        undone=((BUY, "error", "binding_error"),),
    ),
    # an earlier undo of the order went unknown: its claim raises, and the cart line is still
    # removed (the claim of one undo never skips the next)
    Case(
        "undo",
        "claim_unknown",
        arrived=("remove_from_cart",),
        undone=((BUY, "unknown", "idempotency_outcome_unknown"),),
    ),
]


@pytest.mark.parametrize("runtime", ["n8n", "direct"])
@pytest.mark.parametrize("case", TABLE, ids=lambda c: f"{c.sequence}-{c.point}")
def test_the_write_sequence_is_one_behaviour_on_both_runtimes(
    db: Database, registry: Registry, shopping: Plan, runtime: str, case: Case
) -> None:
    plan = shopping.model_copy(update={"plan_id": str(ULID())})
    rows: list[dict[str, Any]] = []
    marks: list[tuple[int, str]] = []
    ledger = IdempotencyLedger(db, audit=AuditLog(clock=system_clock), clock=system_clock)
    writes = WriteProtocol(ledger, rows.append, owner=f"test-{runtime}", clock=time.perf_counter)
    provider = Provider({"purchase" if case.sequence != "undo" else "cancel_order": case.point})
    settings = {} if case.point == "unbuilt" and case.sequence != "undo" else SETTINGS
    run = _runtime(runtime, plan, registry, provider, settings)

    def mark(step: int, status: str, output: Any) -> None:
        marks.append((step, status))

    if case.sequence == "undo":
        _undo(writes, run, plan, registry, case, rows, marks, mark)
    else:
        _write(writes, run, plan, registry, case, rows, marks, mark)
    assert provider.arrived == list(case.arrived)


def _write(
    writes: WriteProtocol,
    run: WriteRuntime[Any],
    plan: Plan,
    registry: Registry,
    case: Case,
    rows: list[dict[str, Any]],
    marks: list[tuple[int, str]],
    mark: Callable[[int, str, Any], None],
) -> None:
    step = plan.step(BUY)
    write = Write.of(plan.plan_id, step, step.args, registry)
    times = 2 if case.sequence == "replay" else 1
    outcomes: list[WriteDone | Replay] = []
    for _ in range(times):
        if case.raises is None:
            outcomes.append(asyncio.run(write_once(writes, run, write, actor="a", mark=mark)))
            continue
        with pytest.raises(case.raises) as info:
            asyncio.run(write_once(writes, run, write, actor="a", mark=mark))
        if case.sent is not None:
            assert isinstance(info.value, WriteFailedError) and info.value.sent == case.sent
    if case.sequence == "replay":
        assert isinstance(outcomes[0], WriteDone) and isinstance(outcomes[1], Replay)
        assert outcomes[1].result == outcomes[0].result
    state = writes.ledger.state(idempotency_key(plan.plan_id, BUY, step.args))
    assert state is not None and state["state"] == case.ledger
    assert [r["kind"] for r in rows] == list(case.audit)
    assert marks == [(BUY, m) for m in case.marks]


def _undo(
    writes: WriteProtocol,
    run: WriteRuntime[Any],
    plan: Plan,
    registry: Registry,
    case: Case,
    rows: list[dict[str, Any]],
    marks: list[tuple[int, str]],
    mark: Callable[[int, str, Any], None],
) -> None:
    line = {"output": {"id": "line-1"}, "id": "line-1"}
    order: dict[str, Any] = {"output": {}} if case.point == "unbuilt" else {"id": "order-1"}
    done: list[tuple[PlanStep, Mapping[str, Any], Any]] = [
        (plan.step(ADD), {"item": "cable-a", "quantity": 1, "customer": "u-alice"}, line),
        (plan.step(BUY), dict(plan.step(BUY).args), order),
    ]
    if case.point == "claim_unknown":  # an earlier undo of the order was lost
        cancel = compensation_steps(plan, registry, done)[0]
        assert cancel.step == compensation_step(BUY)
        ticket = writes.claim(
            plan_id=plan.plan_id, step=cancel.step, op="x", args=cancel.args, actor="a"
        )
        assert not isinstance(ticket, Replay)
        writes.sending(ticket)
        with pytest.raises(OutcomeUnknownError):
            writes.settle(ticket, Attempt.lost("read timeout"))
        rows.clear()
    undone = asyncio.run(undo_writes(writes, run, plan, registry, done, actor="a", mark=mark))
    compensated = [
        (r["step"], r["status"], r.get("reason")) for r in rows if r["kind"] == "step_compensated"
    ]
    assert compensated == [*case.undone, (ADD, "ok", None)]
    expect = [s for s, status, _ in case.undone if status == "ok"] + [ADD]
    assert undone == expect
    assert marks == [(s, "compensated") for s in expect]
