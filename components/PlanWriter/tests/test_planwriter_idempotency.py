"""PlanWriter on a real PostgreSQL: a finished plan's outcomes become history facts, outcome rows
and library counts exactly once — replays, concurrent calls and a later call after more steps
finished change nothing they should not."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from countersign.contextrag.store import record_history
from countersign.kernel import Plan, Policy
from countersign.planlibrary import PlanLibrary, WordLlamaEmbedder
from countersign.planner import make_plan
from countersign.planner.testing import make_intent
from countersign.planwriter import PlanWriter, normalized_facts
from countersign.signer import sign_plan
from countersign.storage import Database, PlanStore, StorageInputError

T = datetime(2026, 11, 25, 12, tzinfo=UTC)
EMBEDDER = WordLlamaEmbedder()


class Clock:
    def __init__(self) -> None:
        self.now = T

    def __call__(self) -> datetime:
        return self.now


def _stored_plan(db: Database, registry: Any, keyring: Any, name: str = "schedule_meeting") -> Plan:
    plan = make_plan(make_intent(name), [], registry, Policy())
    assert isinstance(plan, Plan)
    pid, key = keyring.active()
    signed = sign_plan(plan, key=key, pubkey_id=pid, signer="planner@system")
    PlanStore(db, clock=lambda: T).save_signed(
        plan, signed.envelope, signed.plan_hash, signed.canonical
    )
    return plan


def _writer(db: Database, clock: Clock) -> PlanWriter:
    lib = PlanLibrary(db, embedder=EMBEDDER, clock=clock)
    return PlanWriter(db=db, library=lib, history=record_history, clock=clock)


def _state(db: Database, plan_id: str) -> tuple[Any, ...]:
    with db.tx() as c:
        hist = c.execute(
            text(
                "SELECT step, key, value, status, created_at FROM history_facts WHERE plan_id = :p ORDER BY step"
            ),
            {"p": plan_id},
        ).all()
        outs = c.execute(
            text(
                "SELECT step, status, result, created_at FROM outcomes WHERE plan_id = :p ORDER BY step"
            ),
            {"p": plan_id},
        ).all()
        lib = c.execute(
            text(
                "SELECT success_count, failure_count, last_used_at, text, embedding::text "
                "FROM plan_library WHERE plan_id = :p"
            ),
            {"p": plan_id},
        ).all()
    return tuple(map(tuple, hist)), tuple(map(tuple, outs)), tuple(map(tuple, lib))


def test_replays_change_nothing(db: Database, registry: Any, keyring: Any) -> None:
    plan = _stored_plan(db, registry, keyring)
    store = PlanStore(db, clock=lambda: T)
    for s in plan.graph:
        store.set_step(plan.plan_id, s.step, "done", output={"result": {"id": f"evt-{s.step}"}})
    clock = Clock()
    writer = _writer(db, clock)
    first = writer.plan_finished(plan.plan_id)
    assert first.facts == first.outcomes == len(plan.graph)
    # one run, counted once whatever its number of steps
    assert len(plan.graph) > 1 and (first.success_count, first.failure_count) == (1, 0)
    before = _state(db, plan.plan_id)
    hist, _outs, lib = before
    assert len(hist) == len(plan.graph) and all(h[3] == "ok" for h in hist)
    assert lib[0][0] == 1 and lib[0][2] == T and lib[0][4] is not None
    # history is PII-light: the op, role, mode and a result handle, never the arguments
    assert hist[0][2] == {
        "op": f"{plan.graph[0].uses}.{plan.graph[0].call}",
        "role": plan.graph[0].role,
        "mode": plan.graph[0].mode,
        "result_id": "evt-1",
    }
    assert "alice@example.com" not in str(hist)
    for _ in range(3):  # replays, later in time
        clock.now += timedelta(hours=1)
        again = writer.plan_finished(plan.plan_id)
        assert (again.facts, again.outcomes) == (0, 0)
        assert (again.success_count, again.failure_count) == (first.success_count, 0)
    assert _state(db, plan.plan_id) == before


def test_concurrent_replays_write_once(db: Database, registry: Any, keyring: Any) -> None:
    plan = _stored_plan(db, registry, keyring)
    store = PlanStore(db, clock=lambda: T)
    for s in plan.graph:
        store.set_step(plan.plan_id, s.step, "done")
    writer = _writer(db, Clock())
    reports: list[Any] = []
    threads = [
        threading.Thread(target=lambda: reports.append(writer.plan_finished(plan.plan_id)))
        for _ in range(6)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r.outcomes for r in reports) == len(plan.graph)
    assert sum(r.facts for r in reports) == len(plan.graph)
    _hist, outs, lib = _state(db, plan.plan_id)
    assert len(outs) == len(plan.graph) and lib[0][:2] == (1, 0)


def test_later_steps_add_only_themselves_and_failures_count(
    db: Database, registry: Any, keyring: Any
) -> None:
    plan = _stored_plan(db, registry, keyring)
    store = PlanStore(db, clock=lambda: T)
    first, *rest = plan.graph
    store.set_step(plan.plan_id, first.step, "done")
    clock = Clock()
    writer = _writer(db, clock)
    r1 = writer.plan_finished(plan.plan_id)
    assert (r1.outcomes, r1.success_count, r1.failure_count) == (1, 1, 0)
    for s in rest:
        store.set_step(plan.plan_id, s.step, "failed" if s.step == rest[-1].step else "compensated")
    # a step that already has an outcome keeps it even if its status is later rewritten
    store.set_step(plan.plan_id, first.step, "failed")
    clock.now += timedelta(days=1)
    r2 = writer.plan_finished(plan.plan_id)
    # the run failed: it counts once, as a failure (not one success and len(rest) failures)
    assert (r2.outcomes, r2.success_count, r2.failure_count) == (len(rest), 0, 1)
    hist, outs, lib = _state(db, plan.plan_id)
    assert [o[1] for o in outs] == ["ok"] + ["failed"] * len(rest)
    assert {h[3] for h in hist[1:]} <= {"failed", "cancelled"}
    assert lib[0][2] == clock.now  # last used moves when something new was recorded


def test_unknown_plan_and_unfinished_steps(db: Database, registry: Any, keyring: Any) -> None:
    writer = _writer(db, Clock())
    with pytest.raises(StorageInputError, match="no stored plan"):
        writer.plan_finished("01JDQ3Z0000000000000000999")
    plan = _stored_plan(db, registry, keyring)
    report = writer.plan_finished(plan.plan_id)  # nothing final yet: library row only
    assert (report.facts, report.outcomes) == (0, 0)
    entry = writer.library.get(plan.plan_id)
    assert entry is not None and entry.last_used_at is None and "schedule meeting" in entry.text
    assert normalized_facts(plan, [{"step": 1, "status": "running"}]) == []
