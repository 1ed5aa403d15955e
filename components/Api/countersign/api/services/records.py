"""A person's records in the runtimes (ContextRAG SPEC §4): the n8n executions and the Temporal
runs of their plans — found for an export, erased by a forget.

An n8n execution is the person's when its data holds one of their plan ids as a whole word (every
step call carries its plan id); for a forgotten subject, also one of theirs that mentions the
subject. An execution that holds none of their plan ids is another person's or the system's, even
when it mentions them. A Temporal run is found by its ``plan_id`` search attribute.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest
from temporalio.client import Client
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError

from countersign.contextrag import ForgetTargets
from countersign.kernel import ascii_digits, format_utc
from countersign.n8n import N8nClient

from ..errors import TemporalUnavailableError
from .runtime import Runtime

__all__ = ["RuntimeRecords", "execution_matcher"]

_PLAN_ID = SearchAttributeKey.for_keyword("plan_id")
#: plan ids quoted into one visibility query
_BATCH = 50
Records = list[dict[str, Any]]


@dataclass
class RuntimeRecords:
    """Find, summarize and erase the runtimes' records of a person's plans."""

    runtime: Runtime

    def _n8n(self) -> N8nClient | None:
        client = getattr(self.runtime.transport, "client", None)
        return client if isinstance(client, N8nClient) else None

    async def executions_of(
        self, plan_ids: Sequence[str], *, mentioning: tuple[Sequence[str], str] | None = None
    ) -> Records | None:
        """The n8n executions of these plans: those whose data holds one of ``plan_ids`` as a
        whole word, or, with ``mentioning`` (more plan ids, a subject), one of those that also
        mentions the subject. None: no n8n runtime."""
        client = self._n8n()
        if client is None:
            return None  # no n8n runtime configured: nothing ran there
        wholly = execution_matcher([p.lower() for p in plan_ids]) if plan_ids else None
        others, subject = mentioning or ((), "")
        partly = execution_matcher([p.lower() for p in others]) if others else None
        names = execution_matcher([subject.lower()]) if subject else None
        if wholly is None and (partly is None or names is None):
            return []
        # whole words only: forgetting "local" must not take every execution that mentions
        # "localhost" (a plan id, an e-mail, a subject still match inside URLs and text)
        found: Records = []
        async for page in client.execution_pages(include_data=True):
            for ex in page:
                blob = json.dumps(ex, default=str, ensure_ascii=False).lower()
                if (wholly is not None and wholly.search(blob)) or (
                    partly is not None
                    and names is not None
                    and partly.search(blob)
                    and names.search(blob)
                ):
                    found.append(ex)
        return found

    async def erase_executions(self, targets: ForgetTargets) -> int | None:
        """Delete the person's n8n executions a forget takes (:meth:`executions_of`)."""
        mentioning = (targets.own_plan_ids, targets.subject) if targets.subject else None
        found = await self.executions_of(targets.plan_ids, mentioning=mentioning)
        client = self._n8n()
        if found is None or client is None:
            return None
        for ex in found:
            await client.delete_execution(str(ex["id"]))
        return len(found)

    async def runs_of(self, plan_ids: Sequence[str]) -> Records | None:
        """Summaries of the Temporal runs of these plans (None: no Temporal client)."""
        temporal = self.runtime.temporal
        if temporal is None:
            return None
        runs: Records = []
        for query in _visibility_queries(plan_ids):
            try:
                async for wf in temporal.list_workflows(query):
                    runs.append(
                        {
                            "workflow_id": wf.id,
                            "run_id": wf.run_id,
                            "workflow_type": wf.workflow_type,
                            "plan_id": wf.typed_search_attributes.get(_PLAN_ID),
                            "status": wf.status.name if wf.status is not None else None,
                            "started_at": format_utc(wf.start_time),
                            "closed_at": format_utc(wf.close_time) if wf.close_time else None,
                        }
                    )
            except RPCError as e:
                raise TemporalUnavailableError(
                    f"export: Temporal could not list runs ({e.status.name}): {e.message}"
                ) from e
        return runs

    async def erase_runs(self, plan_ids: Sequence[str]) -> int | None:
        """Delete the Temporal runs of these plans (every run of a ContinueAsNew chain; a running
        one is terminated first by the server), found by the ``plan_id`` search attribute."""
        temporal = self.runtime.temporal
        if temporal is None:
            return None  # no Temporal configured: nothing ran there
        deleted = 0
        for query in _visibility_queries(plan_ids):
            try:
                async for wf in temporal.list_workflows(query):
                    await _delete_run(temporal, wf.id, wf.run_id)
                    deleted += 1
            except RPCError as e:
                raise TemporalUnavailableError(
                    f"forget: Temporal could not list or delete runs ({e.status.name}): {e.message}"
                ) from e
        return deleted


async def _delete_run(temporal: Client, workflow_id: str, run_id: str) -> None:
    await temporal.workflow_service.delete_workflow_execution(
        DeleteWorkflowExecutionRequest(
            namespace=temporal.namespace,
            workflow_execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
        )
    )


def _visibility_queries(plan_ids: Sequence[str]) -> list[str]:
    """``plan_id IN (…)`` queries, ``_BATCH`` ids each (plan ids are checked ULIDs, so they can
    be quoted into the visibility query)."""
    return [
        "plan_id IN (" + ", ".join(f"'{p}'" for p in plan_ids[i : i + _BATCH]) + ")"
        for i in range(0, len(plan_ids), _BATCH)
    ]


def execution_matcher(needles: Sequence[str]) -> re.Pattern[str]:
    """What finds forgotten data in a runtime record (lower-cased JSON): any needle as a whole
    word — not inside a longer name (``local`` does not match ``localhost``)."""
    words = "|".join(re.escape(n.lower()) for n in needles)
    return re.compile(r"(?<![a-z0-9_])(?:" + words + r")(?![a-z0-9_])")


def execution_summary(ex: Mapping[str, Any]) -> dict[str, Any]:
    """What an export lists of one n8n execution (its data stays in n8n: the ids lead to it)."""
    workflow = ex.get("workflowData") if isinstance(ex.get("workflowData"), Mapping) else {}
    return {
        "execution_id": str(ex.get("id")),
        "workflow_id": ex.get("workflowId"),
        "workflow_name": workflow.get("name") if workflow else None,
        "status": ex.get("status"),
        "mode": ex.get("mode"),
        "started_at": ex.get("startedAt"),
        "stopped_at": ex.get("stoppedAt"),
    }


def by_execution_id(summary: Mapping[str, Any]) -> tuple[int, str]:
    """Sort key of execution summaries: numeric ids in number order."""
    eid = str(summary["execution_id"])
    return (int(eid), eid) if ascii_digits(eid) else (0, eid)
