"""The interactive reconciler's passes (ExecuteOrchestrator SPEC 10): the production caller of
``Settler.settle``, run by the API process (its lifespan) at start and every few seconds.

A pass moves every sent key whose holder's lease expired to ``unknown`` (the ledger's
``recover_expired``), then looks at each plan with a ``step_started`` and no ``execute_finished``
(an interactive execute that never recorded its end): a plan handed to Temporal is the durable
reconciler's; one whose last event is younger than ``quiet_s`` may still be executing and is left
alone; the others are settled. A plan still unknown after ``attention_after_s`` ends
``needs_attention``. A pass that fails on one plan logs it and goes on with the next.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from countersign.kernel import CountersignError
from countersign.storage import PlanEvents

from .settle import Settlement, Settler

__all__ = ["SettleLoop"]

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
    #: plans handed to Temporal (the durable reconciler's), not looked at again
    _durable: set[str] = field(default_factory=set)

    def candidates(self) -> list[str]:
        """Plans whose interactive execute started a write and never recorded its end."""
        rows = self.events.open_ones("step_started", until="execute_finished")
        seen: dict[str, None] = {}
        for r in rows:
            seen.setdefault(str(r["plan_id"]), None)
        return [p for p in seen if p not in self._durable]

    async def pass_once(self, *, now: datetime | None = None) -> list[Settlement]:
        """One pass; the settlements it reached (plans left alone are not listed)."""
        clock = self.settler.executor().clock
        out: list[Settlement] = []
        for plan_id in self.candidates():
            events = self.events.since(plan_id, limit=2_000)
            if any(e["kind"] == "handed_off" for e in events):
                self._durable.add(plan_id)
                continue
            age = (now or clock()) - events[-1]["ts"] if events else timedelta(0)
            if age < timedelta(seconds=self.quiet_s):
                continue
            decide = age >= timedelta(seconds=self.attention_after_s)
            try:
                out.append(await self.settler.settle(plan_id, decide=decide))
            except (CountersignError, OSError) as e:
                _log.warning("settling plan %s: %s", plan_id, str(e)[:300])
        return out

    async def passes(self, every_s: float) -> None:
        """Forever (until cancelled): a pass now, then one every ``every_s`` seconds."""
        while True:
            try:
                await self.pass_once()
            except (CountersignError, OSError) as e:  # the database is away: next pass
                _log.warning("settle pass failed: %s", str(e)[:300])
            await asyncio.sleep(every_s)
