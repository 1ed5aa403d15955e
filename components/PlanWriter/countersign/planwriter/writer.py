"""PlanWriter (PlanWriter SPEC): a finished execution's outcomes → History + PlanLibrary, idempotently.

For a plan whose execution ended (interactive ``execute_finished``, durable ``finish_plan``), it
reads the plan and its steps' recorded statuses from the plan store (what the runtimes wrote),
and in ONE transaction, under a per-plan advisory lock:

1. for every step with a final status, one normalized, PII-light history fact
   (``record_history``, keyed ``(plan_id, step, key)``) and one ``outcomes`` row keyed
   ``(plan_id, step)`` — inserted only if absent;
2. the plan's library row: text and embedding refreshed, ``success_count`` / ``failure_count``
   the plan's one run read from its ``outcomes`` rows (1/0 none failed, 0/1 a step failed),
   ``last_used_at`` = when it finished.

A replay (the same call again, a retried activity, a crash between steps) inserts nothing new and
recounts the same numbers, so it changes nothing (tests: ``test_planwriter_idempotency.py``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, JsonValue
from sqlalchemy import Connection, Engine, text

from countersign.contextrag.store import record_history
from countersign.kernel import (
    CountersignError,
    Plan,
    Settings,
    StepMode,
    StepRole,
    parse_contract,
)
from countersign.planlibrary import (
    Embedder,
    LibraryEntry,
    PlanLibrary,
    configured_embedder,
    default_embedder,
    plan_text,
)
from countersign.storage import Database, PlanStore, StorageInputError, stored_document

__all__ = ["HistoryRecorder", "OutcomeFact", "PlanWriter", "WriteReport", "normalized_facts"]

#: a step's recorded status → (history status, library outcome); steps not final are skipped
_FINAL: dict[str, tuple[str, str]] = {
    "done": ("ok", "ok"),
    "skipped": ("skipped", "ok"),
    "failed": ("failed", "failed"),
    "compensated": ("cancelled", "failed"),
}


class HistoryRecorder(Protocol):
    """``countersign.contextrag.store.record_history``: one idempotent history row."""

    def __call__(
        self,
        engine_or_conn: Engine | Connection,
        *,
        user_id: str,
        plan_id: str,
        step: int,
        intent: str,
        key: str,
        value: JsonValue,
        status: str,
        at: datetime,
    ) -> bool: ...


class OutcomeFact(BaseModel):
    """The value of one normalized history fact (key ``outcome``) and of its ``outcomes.result``:
    which op ran, in which role and mode, and the provider's handle on what it wrote. PII-light
    by construction: no arguments, no read outputs (``schemas/OutcomeFact.json``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    op: str = Field(
        max_length=200, description="connector.call of the step, e.g. caldav.create_event"
    )
    role: StepRole = Field(description="the step's role in the plan (Fetcher … Notifier)")
    mode: StepMode = Field(description="interactive | durable, as in the plan")
    result_id: str | None = Field(
        default=None, max_length=200, description="the provider's id of what the step wrote"
    )


@dataclass(frozen=True)
class WriteReport:
    """What one call wrote: the new history facts and outcome rows (0 on a replay)."""

    plan_id: str
    facts: int
    outcomes: int
    success_count: int
    failure_count: int


#: ``(step, key, value, history status, outcome)`` of one final step
_Fact = tuple[int, str, dict[str, JsonValue], str, str]


def normalized_facts(plan: Plan, steps: list[dict[str, Any]]) -> list[_Fact]:
    """``(step, key, value, history status, outcome)`` per final step: the op it called, its
    role and mode, and a handle on what it wrote (the provider's ``id`` only) — never the
    arguments or the read outputs (private content stays with the plan)."""
    out = []
    for s in steps:
        final = _FINAL.get(str(s["status"]))
        if final is None:
            continue
        step = plan.step(int(s["step"]))
        result_id: str | None = None
        output = s.get("output")
        if isinstance(output, dict):
            result = output.get("result") if isinstance(output.get("result"), dict) else output
            handle = result.get("id") if isinstance(result, dict) else None
            if isinstance(handle, str | int) and not isinstance(handle, bool):
                result_id = str(handle)[:200]
        fact = OutcomeFact(
            op=f"{step.uses}.{step.call}"[:200], role=step.role, mode=step.mode, result_id=result_id
        )
        value: dict[str, JsonValue] = fact.model_dump(mode="json", exclude_none=True)
        out.append((step.step, "outcome", value, final[0], final[1]))
    return out


@dataclass
class PlanWriter:
    """Writes a finished plan's outcomes to History and the PlanLibrary (module docstring)."""

    db: Database
    library: PlanLibrary
    history: HistoryRecorder
    clock: Callable[[], datetime]
    _plans: PlanStore = field(init=False)

    def __post_init__(self) -> None:
        self._plans = PlanStore(self.db, clock=self.clock)

    @classmethod
    def for_database(
        cls, db: Database, *, clock: Callable[[], datetime], embedder: Embedder | None = None
    ) -> PlanWriter:
        """The writer the composition roots use: ContextRAG's ``record_history`` and the
        process's shared offline embedder unless one is given."""
        library = PlanLibrary(db, embedder=embedder or default_embedder(), clock=clock)
        return cls(db=db, library=library, history=record_history, clock=clock)

    @classmethod
    def for_settings(
        cls, db: Database, settings: Settings, *, clock: Callable[[], datetime]
    ) -> PlanWriter:
        """The writer of a process's entry point: the embedder its settings choose
        (``COUNTERSIGN_EMBEDDING_MODEL`` through litellm, else the offline default), checked
        against the database's vector column now — a model that does not fit stops the start
        with an ``EmbeddingError`` naming both lengths, instead of failing every insert."""
        writer = cls.for_database(db, clock=clock, embedder=configured_embedder(settings))
        writer.library.check_embedder()
        return writer

    def record(self, plan_id: str, *, audit: Callable[..., None]) -> WriteReport | None:
        """``plan_finished`` for an orchestrator's call site: a failure never fails the execution
        it records; it is audited (``plan_writer_failed``, the error's code) and the next call
        for the plan (a replay) writes what is missing."""
        try:
            return self.plan_finished(plan_id)
        except CountersignError as e:
            audit(
                kind="plan_writer_failed",
                status="error",
                actor="plan_writer",
                plan_id=plan_id,
                reason=e.code,
            )
            return None

    def plan_finished(self, plan_id: str) -> WriteReport:
        """Record the plan's final step outcomes; idempotent (a replay changes nothing).

        Raises:
            StorageInputError: no stored plan ``plan_id``.
            EmbeddingError: the embedder failed (nothing written; call again).
        """
        row = self._plans.get(plan_id)
        if row is None:
            raise StorageInputError(f"plan writer: no stored plan {plan_id[:40]!r}")
        plan = parse_contract(Plan, stored_document(row)["plan"], what=f"stored plan {plan_id}")
        facts = normalized_facts(plan, row["steps"])
        doc = plan_text(plan)
        vector = self.library.embed([doc])[0]  # before the transaction: no lock held meanwhile
        now = self.clock()
        user, intent = plan.intent.user_id, plan.intent.intent
        with self.db.tx() as c:
            c.execute(
                text("SELECT pg_advisory_xact_lock(hashtext('planwriter:' || :p))"), {"p": plan_id}
            )
            new_facts = self._record_facts(c, plan_id, plan, facts, now)
            new_outcomes = _insert_outcomes(c, plan_id, plan, facts, now)
            ok, failed = _count_outcomes(c, plan_id)
            entry = LibraryEntry(
                plan_id=plan_id,
                user_id=user,
                intent=intent,
                text=doc,
                success_count=ok,
                failure_count=failed,
                created_at=plan.meta.created_at,
            )
            self.library.upsert(c, entry, vector=vector)
            # counts recounted (a replay sets the same numbers); last use moves only when
            # this call recorded something new
            c.execute(
                text(
                    "UPDATE plan_library SET success_count = :ok, failure_count = :f, "
                    "last_used_at = CASE WHEN :new THEN :now ELSE last_used_at END "
                    "WHERE plan_id = :p"
                ),
                {"ok": ok, "f": failed, "new": new_outcomes > 0, "now": now, "p": plan_id},
            )
        return WriteReport(plan_id, int(new_facts), new_outcomes, int(ok), int(failed))

    def _record_facts(
        self, c: Connection, plan_id: str, plan: Plan, facts: list[_Fact], now: datetime
    ) -> int:
        """Step 1's history facts (``record_history``); how many were new."""
        return sum(
            self.history(
                c,
                user_id=plan.intent.user_id,
                plan_id=plan_id,
                step=step,
                intent=plan.intent.intent,
                key=key,
                value=value,
                status=status,
                at=now,
            )
            for step, key, value, status, _ in facts
        )


def _insert_outcomes(
    c: Connection, plan_id: str, plan: Plan, facts: list[_Fact], now: datetime
) -> int:
    """Step 1's ``outcomes`` rows, each inserted only if absent; how many were new."""
    new_outcomes = 0
    for step, _, value, _, outcome in facts:
        new_outcomes += c.execute(
            _INSERT_OUTCOME,
            {
                "p": plan_id,
                "s": step,
                "provider": plan.step(step).uses[:64],
                "st": outcome,
                "r": json.dumps(value),
                "now": now,
            },
        ).rowcount
    return new_outcomes


def _count_outcomes(c: Connection, plan_id: str) -> tuple[int, int]:
    """Step 2's recount, per run (one signed plan is one run, interactive or durable, whatever
    its number of steps): ``(1, 0)`` when it recorded outcomes and none failed, ``(0, 1)`` when
    any step failed, ``(0, 0)`` before any step's outcome — so the library's "n of m runs
    succeeded" counts runs, never steps."""
    ok, failed = c.execute(
        text(
            "SELECT count(*) FILTER (WHERE status = 'ok'), "
            "count(*) FILTER (WHERE status = 'failed') FROM outcomes WHERE plan_id = :p"
        ),
        {"p": plan_id},
    ).one()
    return (1 if ok and not failed else 0), (1 if failed else 0)


_INSERT_OUTCOME = text(
    """
    INSERT INTO outcomes (plan_id, step, provider, status, result, created_at)
    SELECT CAST(:p AS varchar), CAST(:s AS integer), :provider, :st,
           CAST(:r AS jsonb), :now
    WHERE NOT EXISTS (SELECT 1 FROM outcomes
                      WHERE plan_id = CAST(:p AS varchar)
                        AND step = CAST(:s AS integer))
    """
)
