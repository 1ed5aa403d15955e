"""Settling an execute that was cut short (Api SPEC, settling; ExecuteOrchestrator SPEC 10): what
is known of its writes, the person's "finish" and "undo", and the background passes the API's
lifespan runs (``countersign.execute.settling``) — the production caller of the interactive
reconciliation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from countersign.execute.settle import Settler
from countersign.execute.settling import SettleLoop
from countersign.storage import PlanEvents

from .runtime import Runtime
from .views import PlanViews

__all__ = ["SETTLE_EVERY_S", "SettleDesk"]

#: how often the API looks for cut-short executes (at most; ``ApiConfig.reconcile_every_s``
#: when smaller, none when it is 0)
SETTLE_EVERY_S = 10.0


@dataclass(frozen=True)
class SettleDesk:
    """The caller's cut-short executes: look, finish, undo."""

    runtime: Runtime
    views: PlanViews
    events: PlanEvents

    def settler(self) -> Settler:
        """A settler on the executor in force when it runs (the runtime replaces it)."""
        return Settler(lambda: self.runtime.executor)

    def loop(self) -> SettleLoop:
        """The background passes (started by the API's lifespan)."""
        return SettleLoop(self.settler(), self.events)

    def state(self, plan_id: str, user_id: str) -> dict[str, Any]:
        """What is known of the plan's writes and what the caller may do (404 for a plan that
        is not the caller's)."""
        self.views.document(plan_id, user_id)
        return self.settler().describe(plan_id, user_id=user_id).to_json()

    async def finish(self, plan_id: str, user_id: str) -> dict[str, Any]:
        """Send the missing writes under the approval spent for the cut-short run (409 while a
        write's outcome is unknown, or once the plan can no longer run)."""
        self.views.document(plan_id, user_id)
        return (await self.settler().finish(plan_id, user_id=user_id)).to_json()

    async def undo(self, plan_id: str, user_id: str) -> dict[str, Any]:
        """Compensate what the cut-short run wrote, newest first; the execute ends failed."""
        self.views.document(plan_id, user_id)
        return (await self.settler().undo(plan_id, user_id=user_id)).to_json()
