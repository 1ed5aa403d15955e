"""Running the caller's plans: preview, execute, cancel (Api SPEC, endpoints; durable plans).

A preview runs the plan's reads (read-only, on the step runtime); an execute spends the gate
tokens and runs the writes (ExecuteOrchestrator), or hands durable ones to Temporal; a cancel
ends the plan — through Temporal's own cancellation for a run there. Each is refused for a plan
that was cancelled; a cancel is refused for a plan that already ended. A failed execute is handed
to ``after_failure`` (``Planning.after_failure``: the failure table's re-plan makes a revision).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from countersign.audit import AuditLog
from countersign.execute import ExecuteReport
from countersign.intake import Contact
from countersign.kernel import CountersignError
from countersign.preview import run_preview
from countersign.signer import KeyRing
from countersign.steps import StoreRecorder
from countersign.storage import Database

from ..core import TERMINAL
from ..errors import DurableUpdateError, PlanCancelledError, PlanFinishedError
from ..shown_reads import shown_plan
from .durable import DurableLink
from .runtime import Runtime
from .views import PlanViews

__all__ = ["AfterFailure", "Runs"]

#: hears a failed execute: (plan id, user, the report's failure or None, the error raised or None)
AfterFailure = Callable[
    [str, str, Mapping[str, Any] | None, BaseException | None], Awaitable[str | None]
]


@dataclass
class Runs:
    """Preview, execute and cancel the caller's plans."""

    db: Database
    views: PlanViews
    runtime: Runtime
    recorder: StoreRecorder
    audit: AuditLog
    durable: DurableLink
    keyring: KeyRing
    connector_settings: Mapping[str, str]
    clock: Callable[[], datetime]
    #: the caller's contacts, to name the people whose calendars were read (``Chat.people``;
    #: None: people are named by their address)
    people: Callable[[str], Sequence[Contact]] | None = None
    #: what follows a failed execute (set by ``Planning``: a re-plan makes a revision); returns
    #: the revision's plan id when one was made
    after_failure: AfterFailure | None = None

    async def preview(self, plan_id: str, user_id: str) -> dict[str, Any]:
        """Run the read-only preview (on n8n); the Preview wrapper, with ``shown``: what the card
        shows of the reads and the writes (``shown_reads.shown_plan``)."""
        document = self.views.document(plan_id, user_id)
        self.views.not_cancelled(plan_id)
        transport = self.runtime.transport
        if transport is None:
            raise PlanCancelledError("no step runtime is configured for previews")
        result = await run_preview(
            document,
            keys=self.keyring,
            registry=self.runtime.registry,
            transport=transport,
            recorder=self.recorder,
            settings=self.connector_settings,
            credentials=self.runtime.credentials,
            actor=user_id,
            now=self.clock(),
        )
        out = result.wrapper.to_json()
        out["shown"] = await self.shown(document["plan"], result.outputs, user_id)
        return out

    async def shown(
        self, plan: Mapping[str, Any], outputs: Mapping[Any, Any] | None, user_id: str
    ) -> dict[str, Any]:
        """What the card shows of ``plan``'s reads (``outputs``) and writes, people named by
        the caller's contacts (the caller as "you")."""
        people = await asyncio.to_thread(self.people, user_id) if self.people else ()
        return shown_plan(plan, outputs, self.runtime.registry, people, me=user_id)

    async def execute(self, plan_id: str, user_id: str, tokens: Mapping[str, str]) -> ExecuteReport:
        """Execute with the given gate tokens (each spent now). A revision that was handed to
        Temporal replaces its parent: the parent's run is cancelled then (not before, so the
        person never stops watching while they look at the revised card)."""
        document = self.views.document(plan_id, user_id)
        self.views.not_cancelled(plan_id)
        try:
            report = await self.runtime.executor.execute(document, user_id=user_id, tokens=tokens)
        except CountersignError as e:  # stale, a resource held, an unknown outcome: said, raised
            if self.after_failure is not None:
                await self.after_failure(plan_id, user_id, None, e)
            raise
        if report.failure is not None and self.after_failure is not None:
            await self.after_failure(plan_id, user_id, report.failure, None)
        parent = self.views.parent_of(plan_id)
        if report.status == "handed_off" and parent is not None:
            with contextlib.suppress(PlanCancelledError, DurableUpdateError):  # ended already
                self.views.not_cancelled(parent)
                await self.cancel(parent, user_id)
        return report

    async def cancel(self, plan_id: str, user_id: str) -> dict[str, Any]:
        """Cancel: no later preview, approval or execute of this plan runs (audited); a run on
        Temporal is cancelled through Temporal's own cancellation — the one cancel path, the same
        as the UI's "Request Cancellation": the workflow records the outcome and ends CANCELED.
        A plan that already ended is not cancelled: ``PlanFinishedError`` (409) names its status
        (a completed plan's writes happened; calling it cancelled would lie)."""
        self.views.document(plan_id, user_id)
        status = self.views.state(plan_id).status
        if status in TERMINAL:
            raise PlanFinishedError(
                f"plan {plan_id} is already {status}: there is nothing left to cancel"
                + ("; what it wrote stays written" if status == "completed" else "")
            )
        run = self.durable.handed_to(plan_id)
        if run is not None:
            await self.durable.cancel(run)
        with self.db.tx() as c:
            self.audit.append(
                c,
                {
                    "kind": "plan_cancelled",
                    "status": "cancelled",
                    "actor": user_id,
                    "plan_id": plan_id,
                },
            )
        return {"plan_id": plan_id, "status": "cancelled"}
