"""The caller's memory over HTTP (ContextRAG SPEC §3–§5): preferences and consent, facts,
forget, export.

A forget erases the runtimes' records first — the Temporal runs of the plans it takes (a running
watcher stops writing), then the n8n executions — while the rows that name those plans still
exist; then every table, the audit rows redacted, audited with the counts. A runtime that cannot
be erased stops it before any row is deleted (503 ``forget_incomplete``): the same forget again
finishes the job.

n8n (issue 27 §6; ``countersign.n8n.keeping``): only the person's own executions are deleted —
those whose trigger body names a plan the forget takes (for a subject, also one of their plans
that mentions the subject); another person's execution that mentions them is never deleted: a
forget of everything redacts the person's address and plan ids in it (``n8n_executions_redacted``)
through ``n8n_store`` (n8n's database), and a write in it still reconciles by its key.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from countersign.audit import AuditLog
from countersign.contextrag import ForgetChangedError, ForgetTargets, MemoryStore
from countersign.kernel import CountersignError
from countersign.n8n import N8nClient
from countersign.n8n.keeping import ExecutionStore, forget_executions
from countersign.storage import Database

from ..errors import ForgetIncompleteError
from .records import RuntimeRecords, by_execution_id, execution_summary

__all__ = ["Memory"]

#: times a forget starts over when a plan was made while the runtimes' records were erased
_ATTEMPTS = 3
#: what a forget says about n8n when none is configured
_NO_N8N: dict[str, int | None] = {"n8n_executions_deleted": None}


@dataclass
class Memory:
    """Preferences, consent, facts, forget and export of the caller."""

    db: Database
    store: MemoryStore
    records: RuntimeRecords
    audit: AuditLog
    #: n8n's execution data, where a forget redacts another person's records (None: a forget
    #: that must redact stops with ``forget_incomplete``, pending ``n8n``)
    n8n_store: ExecutionStore | None = None

    def prefs(self, user_id: str) -> dict[str, Any]:
        """The caller's preferences and consent per purpose."""
        return self.store.prefs(user_id)

    def put_prefs(self, user_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Set preferences (``null`` removes one) and grant or revoke consent per purpose; a
        consent change is audited ``consent_changed`` (purposes only)."""
        out = self.store.put_prefs(user_id, body)
        consent = body.get("consent") or {}
        if consent:
            with self.db.tx() as c:
                self.audit.append(
                    c,
                    {
                        "kind": "consent_changed",
                        "status": "ok",
                        "actor": user_id,
                        "details": {"consent": dict(sorted(consent.items()))},
                    },
                )
        return out

    def add(self, user_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Store facts and contacts; their ids."""
        return self.store.add(user_id, body)

    async def forget(self, user_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Forget the caller's data or one subject (module docstring)."""
        for _ in range(_ATTEMPTS):
            targets = await asyncio.to_thread(self.store.forget_targets, user_id, body)
            erased = await self._erase_records(targets, user_id)
            try:
                out = await asyncio.to_thread(
                    self.store.forget,
                    user_id,
                    body,
                    audit=self.audit,
                    erased=erased,
                    expected=targets.plan_ids,
                )
            except ForgetChangedError:
                continue  # a plan was made meanwhile: erase its records too, then delete
            out.pop("needles")
            return {**out, **erased}
        raise ForgetChangedError(
            "forget: the person's plans kept changing while their records were erased; try again"
        )

    async def _erase_executions(self, targets: ForgetTargets, user_id: str) -> dict[str, int]:
        """The person's n8n executions deleted, other people's that mention them redacted
        (module docstring); empty when no n8n runtime is configured."""
        client = getattr(self.records.runtime.transport, "client", None)
        if not isinstance(client, N8nClient):
            return {}
        subject = targets.subject
        done = await forget_executions(
            client,
            self.n8n_store,
            own=targets.plan_ids,
            own_if_mentioning=targets.own_plan_ids if subject else (),
            # a subject is the person's own data about someone: other people's records of that
            # someone are theirs; a forget of everything takes the person out of every record
            needles=[subject] if subject else [user_id, *targets.plan_ids],
            redact_others=subject is None,
        )
        return {"n8n_executions_deleted": done.deleted, "n8n_executions_redacted": done.redacted}

    async def _erase_records(self, targets: ForgetTargets, user_id: str) -> dict[str, int | None]:
        """Erase the Temporal runs and n8n executions a forget takes; what each erased.

        Raises:
            ForgetIncompleteError: a runtime could not be erased (audited, no content).
        """
        erased: dict[str, int | None] = {}
        pending: dict[str, str] = {}
        try:
            erased["temporal_runs_deleted"] = await self.records.erase_runs(list(targets.plan_ids))
        except CountersignError as e:
            pending["temporal"] = e.code
        try:
            erased.update(await self._erase_executions(targets, user_id) or _NO_N8N)
        except CountersignError as e:
            pending["n8n"] = e.code
        if not pending:
            return erased
        await asyncio.to_thread(
            self.store.forget_incomplete,
            targets.scope,
            erased=erased,
            pending=pending,
            audit=self.audit,
        )
        raise ForgetIncompleteError(
            f"forget: {' and '.join(sorted(pending))} could not be erased "
            f"({', '.join(f'{k}: {v}' for k, v in sorted(pending.items()))}); nothing "
            "was deleted from the tables — forget again to finish",
            pending=pending,
            erased=erased,
        )

    async def export(self, user_id: str) -> dict[str, Any]:
        """Everything stored about the caller (ContextRAG SPEC §4): every row of theirs in the
        tables, and a summary of each runtime record a forget of everything would erase — the
        n8n executions of their plans (id, workflow id and name, times, status) and the
        Temporal runs of their plans (ids, type, status, times). A runtime that cannot be read
        is named under ``runtimes.<store>.error`` and ``complete`` is false."""
        out = await asyncio.to_thread(self.store.export, user_id)
        plan_ids = [str(p["plan_id"]) for p in out["tables"].get("plans", [])]
        runtimes: dict[str, Any] = {}
        try:
            found = await self.records.executions_of(plan_ids)
            runtimes["n8n"] = (
                None
                if found is None
                else {
                    "executions": sorted((execution_summary(e) for e in found), key=by_execution_id)
                }
            )
        except CountersignError as e:
            runtimes["n8n"] = {"error": e.code}
        try:
            runs = await self.records.runs_of(plan_ids)
            runtimes["temporal"] = None if runs is None else {"runs": runs}
        except CountersignError as e:
            runtimes["temporal"] = {"error": e.code}
        out["runtimes"] = runtimes
        out["complete"] = not any(isinstance(v, dict) and "error" in v for v in runtimes.values())
        return out
