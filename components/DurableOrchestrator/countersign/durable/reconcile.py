"""Record the end of durable runs that ended outside Countersign (DurableOrchestrator SPEC,
Reconciliation).

Terminate (from the Temporal UI or CLI) runs no workflow code, and a run can time out or be lost:
then nothing records how it ended. A pass finds the plans handed to Temporal (a ``handed_off``
event) whose end is not recorded (no ``durable_finished``), asks Temporal how each run ended, and
records ``durable_finished`` with that outcome and the plan's status — once: the write holds a
per-plan lock and re-checks under it, so the API's pass and ``countersign reconcile`` running
together record it one time. Running runs are left alone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from temporalio.client import Client
from temporalio.service import RPCError

from countersign.audit import AuditLog
from countersign.kernel.process import ServiceError
from countersign.storage import Database, PlanEvents, PlanStore

__all__ = ["DurableReconciler", "ReconcileError", "ended_outcome"]

_log = logging.getLogger("countersign.durable.reconcile")

#: how a Temporal run that ended without recording it ended (its execution status) → the outcome
#: recorded and the plan's status; running ones are not ended
_TEMPORAL_ENDS = {
    "TERMINATED": ("terminated", "failed"),
    "TIMED_OUT": ("timed_out", "failed"),
    "FAILED": ("failed", "failed"),
    "CANCELED": ("cancelled", "cancelled"),
    "COMPLETED": ("completed", "completed"),
}


def ended_outcome(execution_status: str) -> tuple[str, str] | None:
    """``(outcome, plan status)`` for a run Temporal says has ended; None while it runs."""
    return _TEMPORAL_ENDS.get(execution_status)


class ReconcileError(ServiceError):
    """Temporal could not be asked how the durable runs ended (the next pass retries)."""

    code = "durable_reconcile_failed"
    retryable = True


@dataclass
class DurableReconciler:
    """One deployment's reconciliation passes over its Temporal client and database."""

    client: Client
    db: Database
    events: PlanEvents
    plans: PlanStore
    audit: AuditLog

    @classmethod
    def for_database(
        cls, client: Client, db: Database, *, clock: Callable[[], datetime]
    ) -> DurableReconciler:
        """A reconciler over ``db``'s plans, event log and audit chain."""
        return cls(client, db, PlanEvents(db), PlanStore(db, clock=clock), AuditLog(clock=clock))

    async def reconcile(
        self, *, actor: str = "reconciler", closed_since: datetime | None = None
    ) -> tuple[dict[str, str], ...]:
        """Record how each unrecorded run ended; returns what was recorded.

        Without ``closed_since`` (the API's start, ``countersign reconcile``) every such plan's
        run is described; with it (the API's periodic pass) one visibility query lists the runs
        closed since then, so a pass costs one SQL query and one list call however many runs
        are still watching.

        Raises:
            ReconcileError: Temporal did not answer (nothing more is recorded by this pass).
        """
        pending = {
            str(e["details"]["workflow_id"]): str(e["plan_id"])
            for e in self.events.open_ones("handed_off", until="durable_finished")
            if isinstance(e.get("details"), dict) and e["details"].get("workflow_id")
        }
        if not pending:
            return ()
        ended = await self._ended(pending, closed_since)
        done: tuple[dict[str, str], ...] = ()
        for wid, status in ended.items():
            known = ended_outcome(status)
            if known is not None and self._record(pending[wid], wid, status, known, actor):
                done += ({"plan_id": pending[wid], "workflow_id": wid, "outcome": known[0]},)
        return done

    async def _ended(
        self, pending: dict[str, str], closed_since: datetime | None
    ) -> dict[str, str]:
        """Temporal's execution status of each pending run that has closed (by id)."""
        ended: dict[str, str] = {}
        try:
            if closed_since is None:
                for wid in pending:
                    desc = await self.client.get_workflow_handle(wid).describe()
                    ended[wid] = desc.status.name if desc.status else ""
            else:
                since = closed_since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                async for run in self.client.list_workflows(
                    f'CloseTime >= "{since}" AND ExecutionStatus != "Running"'
                ):
                    if run.id in pending and run.status is not None:
                        ended[run.id] = run.status.name
        except RPCError as e:
            raise ReconcileError(f"reconciling durable runs: {e.message}") from e
        return ended

    def _record(
        self, plan_id: str, wid: str, status: str, known: tuple[str, str], actor: str
    ) -> bool:
        """Record one run's end unless another pass did (under the plan's lock); whether it
        was recorded here."""
        outcome, plan_status = known
        with self.db.tx() as c:
            if not self.events.lock_absent(c, plan_id, "durable_finished"):
                return False
            self.plans.set_status(plan_id, plan_status)
            self.audit.append(
                c,
                {
                    "kind": "durable_finished",
                    "status": outcome,
                    "actor": actor,
                    "plan_id": plan_id,
                    "reason": f"the run ended {status or '?'} outside Countersign",
                    "details": {"workflow_id": wid[:80], "plan_status": plan_status},
                },
            )
        return True

    async def passes(self, every_s: float) -> None:
        """Forever (until cancelled): every ``every_s`` seconds, record the end of durable runs
        that closed since the pass before. Each pass looks back three intervals (at least a
        minute) so a run whose close reaches Temporal's visibility late is still seen; a run
        already recorded is skipped. A failed pass is logged and the next one tries again."""
        last = datetime.now(UTC)
        while True:
            await asyncio.sleep(every_s)
            now = datetime.now(UTC)
            since = last - timedelta(seconds=max(3 * every_s, 60.0))
            try:
                await self.reconcile(closed_since=since)
            except Exception:  # the loop must outlive a failed pass
                _log.warning("a durable reconcile pass failed; the next one retries", exc_info=True)
            else:
                last = now
