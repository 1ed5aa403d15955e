"""Edges of the interactive runtime: the n8n transport and the storage-backed recorder."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from countersign.audit import AuditLog
from countersign.kernel import CountersignError, SignatureError, SignedPlan
from countersign.kernel.tracing import inject_trace_headers
from countersign.n8n import N8nApiError, N8nClient
from countersign.signer import VerifiedPlan
from countersign.storage import Database, PlanStore
from countersign.workflowbuilder import StepWorkflow

from .http import observed

__all__ = ["N8nTransport", "StoreRecorder"]


class N8nTransport:
    """Runs step workflows on n8n: deploy once (by name), call by webhook."""

    def __init__(
        self, client: N8nClient, *, webhook_headers: Mapping[str, str] | None = None
    ) -> None:
        self.client = client
        self._headers = dict(webhook_headers or {})
        self._ids: dict[str, str] = {}
        self._lock = asyncio.Lock()
        self.calls = 0

    async def deploy(self, workflow: StepWorkflow) -> None:
        """Create and activate the step's workflow unless a workflow of that name exists."""
        name = str(workflow.workflow["name"])
        async with self._lock:
            if name in self._ids:
                return
            # n8n's name filter matches substrings: keep the workflow of exactly this name
            existing = [
                w for w in await self.client.list_workflows(name=name) if w.get("name") == name
            ]
            if existing:
                wid = str(existing[0]["id"])
                if not existing[0].get("active"):
                    await self.client.activate(wid)
            else:
                created = await self.client.create_workflow(workflow.workflow)
                wid = str(created["id"])
                await self.client.activate(wid)
            self._ids[name] = wid

    async def executions_of(self, name: str) -> list[dict[str, Any]]:
        """The recorded executions (with their data) of the step workflow called ``name``;
        empty when no such workflow was ever deployed."""
        found = await self.client.list_workflows(name=name)
        if not found:
            return []
        return await self.client.list_executions(
            workflow_id=str(found[0]["id"]), limit=250, include_data=True
        )

    async def call(
        self, path: str, body: Mapping[str, Any], *, write: bool = False
    ) -> Mapping[str, Any]:
        """Call the step webhook; the node's output item (``write``: see ``N8nClient``). Logged
        and traced (``n8n.call``; the trace goes on in the call's ``traceparent`` header)."""
        self.calls += 1
        with observed("n8n.call", webhook=path, write=write, **_plan_fields(body)) as line:
            headers = inject_trace_headers(dict(self._headers))
            out = await self.client.call_webhook(
                path, dict(body), headers=headers or None, write=write
            )
            line["status"] = "ok"
        return out if isinstance(out, Mapping) else {"body": out}

    async def call_batch(self, path: str, body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        """Call a batch workflow's webhook (reads only: re-sent like any read); its items."""
        self.calls += 1
        with observed("n8n.call", webhook=path, batch=True, **_plan_fields(body)) as line:
            headers = inject_trace_headers(dict(self._headers))
            out = await self.client.call_webhook(path, dict(body), headers=headers or None)
            line["status"] = "ok"
        if not isinstance(out, list) or not all(isinstance(i, Mapping) for i in out):
            raise N8nApiError(
                f"batch webhook {path}", 200, f"expected a list of items, got {str(out)[:200]}"
            )
        return out


def _plan_fields(body: Mapping[str, Any]) -> dict[str, str | int | bool | None]:
    """The plan and step a webhook body names (``{"plan": {"plan_id", "step"}}``), for the log."""
    plan = body.get("plan")
    if not isinstance(plan, Mapping):
        return {}
    step = plan.get("step")
    return {
        "plan_id": str(plan.get("plan_id")),
        "step": step if isinstance(step, int) else None,
    }


def _plan_id_of(document: SignedPlan | Mapping[str, Any]) -> str | None:
    """The plan id a refused document names, if it names a plausible one (it proved nothing)."""
    if isinstance(document, SignedPlan):
        return document.plan.plan_id
    try:
        pid = document["plan"]["plan_id"]
    except (KeyError, TypeError):
        return None
    return pid if isinstance(pid, str) and len(pid) == 26 else None


class StoreRecorder:
    """Keeps signed plans, preview fingerprints and audit rows in Postgres."""

    def __init__(self, db: Database, *, clock: Callable[[], datetime]) -> None:
        self.db = db
        self._clock = clock
        self.plans = PlanStore(db, clock=self._clock)
        self.audit = AuditLog(clock=self._clock)

    def signature_refused(
        self, document: SignedPlan | Mapping[str, Any], error: CountersignError, *, actor: str
    ) -> None:
        """Audit a refused signature, or a signed plan that may not run any more (registry
        changed, expired): the plan id only if the document names a plausible one."""
        kind = "signature_refused" if isinstance(error, SignatureError) else "plan_refused"
        with self.db.tx() as c:
            self.audit.append(
                c,
                {
                    "kind": kind,
                    "status": "refused",
                    "actor": actor[:128],
                    "plan_id": _plan_id_of(document),
                    "reason": error.code,
                },
            )

    def remember(
        self, verified: VerifiedPlan, *, actor: str, conn: Connection | None = None
    ) -> None:
        """Store a verified plan (idempotent); the first store and its audit row commit together
        (in ``conn`` when the caller has a transaction open)."""

        def audit(c: Connection) -> None:
            self.audit.append(
                c,
                {
                    "kind": "plan_signed",
                    "status": "ok",
                    "actor": actor[:128],
                    "plan_id": verified.plan.plan_id,
                    "details": {
                        "plan_hash": verified.plan_hash,
                        "key": verified.envelope.pubkey_id,
                    },
                },
            )

        self.plans.save_signed(
            verified.plan,
            verified.envelope,
            verified.plan_hash,
            verified.canonical,
            on_insert=audit,
            conn=conn,
        )

    def preview_done(
        self,
        verified: VerifiedPlan,
        fingerprints: Mapping[int, str],
        *,
        actor: str,
        latency_ms: int,
        status: str,
        reason: str | None,
        outputs: Mapping[int, Any] | None = None,
    ) -> None:
        """Store the plan if new, what the preview read (outputs + fingerprints) and its audit
        row, in one transaction (StepRunner SPEC, the recorder: one commit, not three)."""
        with self.db.tx() as c:
            self.remember(verified, actor=actor, conn=c)
            if fingerprints:
                self.plans.save_preview(verified.plan.plan_id, outputs or {}, fingerprints, conn=c)
            self.audit.append(
                c,
                {
                    "kind": "preview_run" if status != "refused" else "preview_refused",
                    "status": status,
                    "actor": actor[:128],
                    "plan_id": verified.plan.plan_id,
                    "latency_ms": latency_ms,
                    "reason": reason[:500] if reason else None,
                    "details": {"reads": len(fingerprints), "steps": sorted(fingerprints)},
                },
            )
