"""``execute.recovery``: the failure table is data — a table that retries a class sends again
(under the same key, the ledger's ``failed`` claimed again), one that does not sends once; the
provider's Retry-After is the wait; an unknown outcome is never sent again whatever the table
says (its ledger key stays ``unknown``); ``action_after`` turns a retry that stopped into ask."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from ulid import ULID

from countersign.audit import AuditLog
from countersign.execute.recovery import Recovery, action_after
from countersign.kernel import Plan, Policy, system_clock
from countersign.kernel.rules import DEFAULT_ON_FAILURE, FailureActions
from countersign.planner import make_plan
from countersign.planner.testing import make_intent
from countersign.registry import Registry
from countersign.steps import Write, WriteProtocol, idempotency_key
from countersign.steps.failures import classify_error
from countersign.steps.writes import Attempt, WriteFailedError
from countersign.storage import Database, IdempotencyLedger, OutcomeUnknownError

LOCAL = Policy(providers={"calendar": "caldav", "mail": "smtp", "chat": "slack"})
ADD = 4


class Scripted:
    """A write runtime that answers each send with the next scripted attempt."""

    def __init__(self, *answers: Attempt) -> None:
        self.answers = list(answers)
        self.sent = 0

    async def prepare_write(self, write: Write, key: str) -> str:
        return key

    async def send_write(self, prepared: str) -> Attempt:
        self.sent += 1
        return self.answers.pop(0)


def _plan(registry: Registry) -> Plan:
    plan = make_plan(
        make_intent(
            "purchase_item",
            entities={"query": f"usb {ULID()}", "max_price": "15.00", "quantity": 1},
        ),
        [],
        registry,
        LOCAL,
    )
    assert isinstance(plan, Plan)
    return plan


def _go(
    db: Database, registry: Registry, table: FailureActions, runtime: Scripted
) -> tuple[Any, list[float], list[dict[str, Any]], IdempotencyLedger, str]:
    plan = _plan(registry)
    audit = AuditLog(clock=system_clock)
    rows: list[dict[str, Any]] = []
    ledger = IdempotencyLedger(db, clock=system_clock, audit=audit)
    writes = WriteProtocol(ledger, rows.append, owner=f"t-{ULID()}", clock=lambda: 0.0)
    waits: list[float] = []

    async def sleep(s: float) -> None:
        waits.append(s)

    def keep(**row: Any) -> None:
        rows.append(row)

    recovery = Recovery(table, keep, sleep)
    step = plan.step(ADD)
    write = Write.of(plan.plan_id, step, {"item": "cable-a", "quantity": 1}, registry)

    async def run() -> Any:
        try:
            return await recovery.write(writes, runtime, write, actor="alice@example.com", mark=_no)
        except Exception as e:  # what it raised is the answer
            return e

    got = asyncio.run(run())
    return got, waits, rows, ledger, idempotency_key(plan.plan_id, ADD, write.args)


def _no(step: int, status: str, output: Any) -> None:
    return None


def test_a_table_that_retries_validation_sends_again(db: Database, registry: Registry) -> None:
    table = FailureActions.model_validate(
        {"classes": {"validation": {"then": "retry", "attempts": 2, "backoff_s": 0.25}}}
    )
    runtime = Scripted(Attempt("answered", 422), Attempt("answered", 201, output={"id": "l1"}))
    got, waits, rows, _, _ = _go(db, registry, table, runtime)
    assert not isinstance(got, Exception), got
    assert runtime.sent == 2 and waits == [0.25]
    assert [r["kind"] for r in rows if r["kind"] == "step_retry"] == ["step_retry"]


def test_the_default_table_asks_on_validation_and_sends_once(
    db: Database, registry: Registry
) -> None:
    runtime = Scripted(Attempt("answered", 422))
    got, waits, _, _, _ = _go(db, registry, DEFAULT_ON_FAILURE, runtime)
    assert isinstance(got, WriteFailedError) and got.sends == 1
    assert runtime.sent == 1 and waits == []
    failure = classify_error(got)
    assert failure is not None and action_after(DEFAULT_ON_FAILURE, failure) == "ask"


def test_retry_after_is_the_wait_and_a_longer_one_is_asked(
    db: Database, registry: Registry
) -> None:
    runtime = Scripted(
        Attempt("answered", 429, headers={"Retry-After": "3"}),
        Attempt("answered", 429, headers={"Retry-After": "600"}),
    )
    got, waits, _, _, _ = _go(db, registry, DEFAULT_ON_FAILURE, runtime)
    assert waits == [3.0] and runtime.sent == 2
    assert isinstance(got, WriteFailedError) and got.sends == 2
    failure = classify_error(got)
    assert failure is not None and failure.cls == "rate_limited"
    assert action_after(DEFAULT_ON_FAILURE, failure) == "ask"


@pytest.mark.parametrize("lost", [Attempt("answered", 503), Attempt.lost("read timeout")])
def test_an_unknown_outcome_is_never_sent_again_whatever_the_table(
    db: Database, registry: Registry, lost: Attempt
) -> None:
    eager = FailureActions.model_validate(
        {"classes": {c: {"then": "retry", "attempts": 5} for c in ("transient", "provider_down")}}
    )
    runtime = Scripted(lost, Attempt("answered", 201))
    got, waits, _, ledger, key = _go(db, registry, eager, runtime)
    assert isinstance(got, OutcomeUnknownError), got
    assert runtime.sent == 1 and waits == []
    assert (ledger.state(key) or {}).get("state") == "unknown"


def test_compensate_is_an_action_the_table_can_name() -> None:
    table = FailureActions.model_validate({"classes": {"conflict": {"then": "compensate"}}})
    failure = classify_error(
        WriteFailedError(4, "provider answered 409", sent=True, attempt=Attempt("answered", 409))
    )
    assert failure is not None and action_after(table, failure) == "compensate"
    assert action_after(DEFAULT_ON_FAILURE, failure) == "replan"
