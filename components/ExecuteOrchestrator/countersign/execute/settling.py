"""The interactive reconciler's passes (ExecuteOrchestrator SPEC 10): the production caller of
``Settler.settle``, run by the API process (its lifespan) at start and every few seconds.

A pass moves every sent key whose holder's lease expired to ``unknown`` (the ledger's
``recover_expired``), then looks at each plan with a ``step_started`` and no ``execute_finished``
(an interactive execute that never recorded its end), or a ``step_unknown`` /
``idempotency_unknown`` never reconciled (a later gate's execute cut short): a plan handed to
Temporal is the durable reconciler's; one whose last event is younger than ``quiet_s`` may still
be executing and is left alone; one whose execute ended after its last write is done with,
unless it ended asking a person (``needs_attention``): that one is settled again from evidence
for ``retry_for_s``. The others are settled. A plan still unknown after ``attention_after_s``
ends ``needs_attention``. Last, a plan whose execute failed and whose undo failed too (n8n was
down when it undid: a ``step_compensated`` not ``ok``) is undone again once quiet, until a pass
undoes it all (``undo_settled``). A pass that fails on one plan logs it and goes on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from countersign.kernel import CountersignError
from countersign.storage import PlanEvents

from .settle import Settlement, Settler

__all__ = ["SettleLoop"]

#: (event kind, the kind that closes it) whose open ones name plans to look at
_OPEN = (
    ("step_started", "execute_finished"),
    ("step_unknown", "idempotency_reconciled"),
    ("idempotency_unknown", "idempotency_reconciled"),
)
#: failed compensations of a plan after which its undo is left to the person
_UNDO_TRIES = 20
#: events of a write that may have been cut short
_CUT = frozenset({"step_started", "step_unknown", "idempotency_unknown"})

_log = logging.getLogger("countersign.execute.settling")


@dataclass
class SettleLoop:
    """Finds cut-short interactive executes and settles them."""

    settler: Settler
    events: PlanEvents
    #: a plan whose last event is younger than this may still be executing (at least the
    #: ledger's lease in production: a live holder renews nothing, so give it its lease)
    quiet_s: float = 60.0
    #: a write still unknown this long after the execute was cut: the person is asked
    attention_after_s: float = 120.0
    #: a plan that asks a person is settled again from evidence this long (n8n back, …)
    retry_for_s: float = 3600.0
    #: plans handed to Temporal (the durable reconciler's), not looked at again
    _durable: set[str] = field(default_factory=set)
    #: plans whose undo went through, not looked at again by this process
    _undone: set[str] = field(default_factory=set)

    def candidates(self) -> list[str]:
        """Plans whose interactive execute started a write and never recorded its end, or left
        a write ``unknown`` that was never reconciled (a later gate's execute cut short; one
        that ended ``needs_attention``, tried again while young)."""
        seen: dict[str, None] = {}
        for kind, until in _OPEN:
            for r in self.events.open_ones(kind, until=until):
                seen.setdefault(str(r["plan_id"]), None)
        return [p for p in seen if p not in self._durable]

    async def pass_once(self, *, now: datetime | None = None) -> list[Settlement]:
        """One pass; the settlements it reached (plans left alone are not listed)."""
        ex = self.settler.executor()
        ex.ledger.recover_expired()  # a sent key whose holder died: ``unknown`` (audited)
        at = now or ex.clock()
        out: list[Settlement] = []
        for plan_id in self.candidates():
            age = self._age(plan_id, at)
            if age is None or age < timedelta(seconds=self.quiet_s):
                continue
            decide = age >= timedelta(seconds=self.attention_after_s)
            try:
                out.append(await self.settler.settle(plan_id, decide=decide))
            except (CountersignError, OSError) as e:
                _log.warning("settling plan %s: %s", plan_id, str(e)[:300])
        await self.undo_pass(at)
        return out

    def _age(self, plan_id: str, now: datetime) -> timedelta | None:
        """How long the plan's cut-short execute has been quiet; None when it is not one to
        settle (durable, ended normally, or asking a person for longer than ``retry_for_s``)."""
        events = self.events.since(plan_id, limit=2_000)
        if any(e["kind"] == "handed_off" for e in events):
            self._durable.add(plan_id)
            return None
        cut = max((i for i, e in enumerate(events) if e["kind"] in _CUT), default=-1)
        end = max((i for i, e in enumerate(events) if e["kind"] == "execute_finished"), default=-1)
        age: timedelta = now - events[-1]["ts"] if events else timedelta(0)
        if end > cut:
            details = events[end].get("details")
            asking = isinstance(details, Mapping) and bool(details.get("needs_attention"))
            if not asking or age > timedelta(seconds=self.retry_for_s):
                return None
        return age

    async def undo_pass(self, now: datetime) -> list[str]:
        """Plans whose execute failed and whose undo failed too (a ``step_compensated`` not
        ``ok`` as the step's last word): undone again once quiet; the plans fully undone."""
        out: list[str] = []
        for r in self.events.open_ones("step_compensated", until="undo_settled"):
            plan_id = str(r["plan_id"])
            if plan_id in self._undone or plan_id in out:
                continue
            events = self.events.since(plan_id, limit=2_000)
            last = {e["step"]: e["status"] for e in events if e["kind"] == "step_compensated"}
            tries = sum(
                1 for e in events if e["kind"] == "step_compensated" and e["status"] != "ok"
            )
            if all(v == "ok" for v in last.values()) or tries > _UNDO_TRIES:
                self._undone.add(plan_id)  # undone, or left to the person (compensation_failed)
                continue
            if not events or now - events[-1]["ts"] < timedelta(seconds=self.quiet_s):
                continue
            try:
                await self.settler.undo_again(plan_id)
            except (CountersignError, OSError) as e:
                _log.warning("undoing plan %s again: %s", plan_id, str(e)[:300])
                continue
            out.append(plan_id)
        return out

    async def passes(self, every_s: float) -> None:
        """Forever (until cancelled): a pass now, then one every ``every_s`` seconds. A failed
        pass is logged and the next one tries again: the loop outlives any error of a pass (the
        database away or just back leaves driver errors no store wrapped; a loop that ended on
        one left every cut-short execute ``running`` until the process restarted)."""
        while True:
            try:
                await self.pass_once()
            except (CountersignError, OSError) as e:  # the database is away: next pass
                _log.warning("settle pass failed: %s", str(e)[:300])
            except Exception:  # the loop must outlive a failed pass
                _log.warning("settle pass failed; the next one retries", exc_info=True)
            await asyncio.sleep(every_s)
