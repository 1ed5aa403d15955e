"""A decision on a plan that runs on Temporal reaches its workflow (Api SPEC, durable plans).

Which workflow a plan was handed to is read from its ``handed_off`` event: the run's id and, since
the hand-off records it, the workflow type. Updates are called by reference on that class
(``WatcherWorkflow.approve_gate``), so a renamed update fails type-checking here instead of at
run time; cancelling is Temporal's own cancellation (the UI's "Request Cancellation").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError
from temporalio.workflow import UpdateMethodMultiParam

from countersign.durable import ApproveGate, PlanExecutionWorkflow, RejectGate, WatcherWorkflow
from countersign.storage import PlanEvents

from ..errors import DurableUpdateError
from .runtime import Runtime

__all__ = ["DurableLink", "HandOff"]

Workflow = type[WatcherWorkflow] | type[PlanExecutionWorkflow]
#: the workflow types a plan is handed to, by their Temporal type name
_WORKFLOWS: dict[str, Workflow] = {w.__name__: w for w in (WatcherWorkflow, PlanExecutionWorkflow)}


@dataclass(frozen=True)
class HandOff:
    """The Temporal run a plan was handed to."""

    workflow_id: str
    workflow: Workflow


def handoff_from(details: dict[str, Any]) -> HandOff | None:
    """The hand-off a ``handed_off`` event's details record (None without a workflow id)."""
    wid = details.get("workflow_id")
    if not wid:
        return None
    workflow = _WORKFLOWS.get(str(details.get("workflow_type")))
    if workflow is None:
        # a hand-off recorded before the event carried the workflow type: the rule the starter
        # used then (a watcher's run is ``watch-<plan_id>``, every other plan's ``plan-<plan_id>``)
        workflow = WatcherWorkflow if str(wid).startswith("watch-") else PlanExecutionWorkflow
    return HandOff(str(wid), workflow)


@dataclass
class DurableLink:
    """Approve, reject and cancel on the run a plan was handed to."""

    runtime: Runtime
    events: PlanEvents

    def handed_to(self, plan_id: str) -> HandOff | None:
        """The run the plan was handed to (its newest ``handed_off`` event), if any."""
        event = self.events.latest(plan_id, "handed_off")
        details = event.get("details") if event else None
        return handoff_from(details) if isinstance(details, dict) else None

    async def approve(self, plan_id: str, run: HandOff, gate: ApproveGate) -> Any:
        """The run's ``approve_gate`` update naming the approval spent here (its hash)."""
        return await self._update(plan_id, run, run.workflow.approve_gate, gate, "approve_gate")

    async def reject(self, plan_id: str, run: HandOff, rejection: RejectGate) -> Any:
        """The run's ``reject_gate`` update (the workflow records the rejection itself)."""
        return await self._update(plan_id, run, run.workflow.reject_gate, rejection, "reject_gate")

    async def cancel(self, run: HandOff) -> None:
        """Request Temporal's cancellation of the run (nothing without a Temporal client)."""
        if self.runtime.temporal is None:
            return
        try:
            await self.runtime.temporal.get_workflow_handle(run.workflow_id).cancel()
        except RPCError as e:
            raise DurableUpdateError(f"{run.workflow_id}: {e.message}") from e

    async def _update(
        self,
        plan_id: str,
        run: HandOff,
        update: UpdateMethodMultiParam[[Any, Any], str],
        arg: Any,
        what: str,
    ) -> Any:
        """Send ``update`` (named ``what`` in a refusal) to the run and wait for its answer."""
        temporal, wid = self.runtime.temporal, run.workflow_id
        if temporal is None:
            raise DurableUpdateError(
                f"plan {plan_id} runs on Temporal ({wid}) and this service has no Temporal client"
            )
        try:
            return await temporal.get_workflow_handle(wid).execute_update(update, arg)
        except WorkflowUpdateFailedError as e:
            cause = str(e.cause) if e.cause is not None else str(e)
            raise DurableUpdateError(f"{wid} refused {what}: {cause}") from e
        except RPCError as e:
            raise DurableUpdateError(f"{wid}: {e.message}") from e
