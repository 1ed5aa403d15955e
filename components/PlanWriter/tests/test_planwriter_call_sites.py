"""The orchestrators hand finished plans to PlanWriter: the durable ``finish_plan`` activity
records outcomes once (a retried activity changes nothing), and a PlanWriter failure is audited
without failing the activity."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import text

from countersign.durable import DurableActivities
from countersign.durable.models import FinishCall
from countersign.kernel import Plan, Policy, system_clock
from countersign.planner import make_plan
from countersign.planner.testing import make_intent
from countersign.planwriter import PlanWriter
from countersign.signer import sign_plan
from countersign.storage import Database, PlanStore

T = datetime(2026, 11, 22, 10, 5, tzinfo=UTC)


def _signed(db: Database, registry: Any, keyring: Any) -> tuple[Plan, dict[str, Any]]:
    plan = make_plan(make_intent("watch_visa_slots"), [], registry, Policy())
    assert isinstance(plan, Plan)
    pid, key = keyring.active()
    signed = sign_plan(plan, key=key, pubkey_id=pid, signer="planner@system")
    PlanStore(db, clock=system_clock).save_signed(
        plan, signed.envelope, signed.plan_hash, signed.canonical
    )
    return plan, signed.to_json()


def _audit_kinds(db: Database, plan_id: str) -> list[str]:
    with db.tx() as c:
        return list(
            c.execute(
                text("SELECT kind FROM audit_log WHERE plan_id = :p ORDER BY seq"), {"p": plan_id}
            ).scalars()
        )


def test_finish_plan_writes_outcomes_once(db: Database, registry: Any, keyring: Any) -> None:
    plan, doc = _signed(db, registry, keyring)
    store = PlanStore(db, clock=system_clock)
    for s in plan.graph:
        store.set_step(plan.plan_id, s.step, "done")
    writer = PlanWriter.for_database(db, clock=lambda: T)
    acts = DurableActivities(
        db, keys=keyring, registry=registry, settings={}, clock=lambda: T, plan_writer=writer
    )
    call = FinishCall(signed=doc, user_id=plan.intent.user_id, outcome="booked", workflow_id="w")
    for _ in range(2):  # Temporal may run an activity again
        assert acts.finish_plan(call) == "completed"
    entry = writer.library.get(plan.plan_id)
    # one durable run, counted once (not once per step), even when the activity runs again
    assert entry is not None and (entry.success_count, entry.failure_count) == (1, 0)
    with db.tx() as c:
        n = c.execute(
            text("SELECT count(*) FROM outcomes WHERE plan_id = :p"), {"p": plan.plan_id}
        ).scalar_one()
    assert n == len(plan.graph)
    assert "plan_writer_failed" not in _audit_kinds(db, plan.plan_id)


def test_a_plan_writer_failure_is_audited_not_raised(
    db: Database, registry: Any, keyring: Any
) -> None:
    plan, doc = _signed(db, registry, keyring)

    class Broken:
        name, dim = "broken", 3

        def embed(self, texts: Any) -> list[list[float]]:
            return [[0.1] * 999 for _ in texts]  # longer than the column: EmbeddingError

    writer = PlanWriter.for_database(db, clock=lambda: T, embedder=Broken())
    acts = DurableActivities(
        db, keys=keyring, registry=registry, settings={}, clock=lambda: T, plan_writer=writer
    )
    call = FinishCall(signed=doc, user_id=plan.intent.user_id, outcome="failed", workflow_id="w")
    assert acts.finish_plan(call) == "failed"
    assert "plan_writer_failed" in _audit_kinds(db, plan.plan_id)
    assert writer.library.get(plan.plan_id) is None
