"""Planning for the caller (Api SPEC, ``POST /v1/intents``, revise, replan).

A structured intent is filled (id, time, user), given ContextRAG's evidence, planned, signed,
verified and stored with its ``plan_signed`` event, then previewed; a revision is the plan's intent
with entities changed, planned and signed anew and linked to the plan it revises (``plan_revised``
on both). What a plan was made from (its evidence) goes back with it: its hash is signed. A step
failure whose action in the policy's failure table is ``replan`` (a conflict, a stale world) makes
a revision the same way, its reason ``failure`` with the class (``after_failure``); the person
approves it anew — an approval never carries over.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ulid import ULID

from countersign.audit import AuditLog
from countersign.contextrag import MemoryStore
from countersign.execute.recovery import action_after
from countersign.kernel import (
    CountersignError,
    Evidence,
    InputError,
    Intent,
    Needs,
    Policy,
    format_utc,
    parse_contract,
)
from countersign.kernel.rules import failure_actions
from countersign.planner import make_plan
from countersign.signer import KeyRing, sign_plan, verify_signed_plan
from countersign.steps import StoreRecorder
from countersign.steps.failures import classify_error
from countersign.storage import Database

from ..errors import UserMismatchError
from ..problems import problem, status_for
from .runs import Runs
from .runtime import Runtime
from .views import PlanViews

__all__ = ["Observe", "Planning", "Proposal", "unobserved"]

#: hears how long an engine took inside a request (``("preview", seconds)``): the app's metrics
Observe = Callable[[str, float], None]


def unobserved(_action: str, _seconds: float) -> None:
    """An ``Observe`` that keeps nothing (callers without metrics)."""


@dataclass(frozen=True)
class Proposal:
    """What planning an intent gave: a signed, previewed plan (``planned``) or what it needs."""

    body: dict[str, Any]
    planned: bool
    #: the engines' share of the request (plan, sign, store, preview), milliseconds
    engine_ms: float = 0.0


@dataclass
class Planning:
    """Plan, sign, store and preview intents of the caller; revise and re-plan their plans."""

    db: Database
    views: PlanViews
    runs: Runs
    runtime: Runtime
    memory: MemoryStore
    recorder: StoreRecorder
    audit: AuditLog
    keyring: KeyRing
    policy: Policy
    clock: Callable[[], datetime]
    signer_name: str = "planner@system"
    #: the context budget of intents read from chat (T1–T5; T5 still needs recorded consent)
    chat_context_budget: int = 5

    def __post_init__(self) -> None:
        # a failed execute's re-plan is a revision made here (Runs has no planner)
        self.runs.after_failure = self.after_failure

    def intent_from(self, body: Mapping[str, Any], user_id: str) -> Intent:
        """A structured intent from a request body; the server fills id, time and user."""
        given = body.get("user_id")
        if given is not None and given != user_id:
            raise UserMismatchError(
                f"the intent names user {str(given)[:128]!r}; you can only ask for yourself"
            )
        filled = {
            **body,
            "intent_id": str(ULID.from_datetime(self.clock())),
            "received_at": format_utc(self.clock()),
            "user_id": user_id,
        }
        return parse_contract(Intent, filled, what="intent")

    def evidence(self, intent: Intent, *, exclude: Sequence[str] = ()) -> list[Evidence]:
        """ContextRAG's evidence for this intent (its ``context_budget``, the caller's memory
        and consent; ``exclude``: source refs the person dropped)."""
        spec = self.runtime.registry.intents.get(intent.intent)
        relevant = {e.name for e in (*spec.required, *spec.optional)} if spec else set()
        return self.memory.evidence(intent, exclude=exclude, relevant=relevant)

    def filled_by_memory(
        self, intent: str, entities: Mapping[str, Any], tz: str, user_id: str
    ) -> set[str]:
        """The entities chat text left open that the caller's memory fills (a confident
        preference for each): the readiness dialogue does not ask for them."""
        body = {
            "intent": intent,
            "entities": dict(entities),
            "tz": tz,
            "context_budget": self.chat_context_budget,
        }
        evidence = self.evidence(self.intent_from(body, user_id))
        floor = self.policy.min_evidence_confidence
        return {e.key for e in evidence if e.type == "preference" and e.confidence >= floor}

    def plan(self, intent: Intent, user_id: str) -> dict[str, Any] | Needs:
        """Plan, sign, verify and store (with its ``plan_signed`` event); or what is missing."""
        return self.plan_with_evidence(intent, user_id)[0]

    def plan_with_evidence(
        self, intent: Intent, user_id: str, *, exclude: Sequence[str] = ()
    ) -> tuple[dict[str, Any] | Needs, list[Evidence]]:
        """As :meth:`plan`, with the evidence the plan was made from (its hash is signed)."""
        evidence = self.evidence(intent, exclude=exclude)
        out = make_plan(intent, evidence, self.runtime.registry, self.policy)
        if isinstance(out, Needs):
            return out, evidence
        pid, key = self.keyring.active()
        signed = sign_plan(out, key=key, pubkey_id=pid, signer=self.signer_name)
        self.recorder.remember(verify_signed_plan(signed, keys=self.keyring), actor=user_id)
        return signed.to_json(), evidence

    async def propose(
        self,
        intent_body: Mapping[str, Any],
        user_id: str,
        *,
        drop: Sequence[str] = (),
        observe: Observe = unobserved,
    ) -> Proposal:
        """Plan a structured intent, sign and store it, and preview it (read-only); or what it
        still needs. A preview that is refused leaves the plan signed: its problem document is
        the answer's ``preview_error``."""
        intent = self.intent_from(intent_body, user_id)
        started = time.perf_counter()
        out, evidence = await asyncio.to_thread(
            lambda: self.plan_with_evidence(intent, user_id, exclude=drop)
        )
        used = [e.to_json() for e in evidence]
        if isinstance(out, Needs):
            needs = {"needs": [n.to_json() for n in out.needs], "intent": out.intent}
            return Proposal({**needs, "evidence": used}, False, _ms_since(started))
        plan_id = out["plan"]["plan_id"]
        preview, preview_error = await self._preview(plan_id, user_id, observe)
        gates = sorted({s["gate_id"] for s in out["plan"]["graph"] if s.get("gate_id")})
        body = {
            "plan_id": plan_id,
            **out,
            "preview": preview,
            "preview_error": preview_error,
            "gates": gates,
            # what ContextRAG gave the planner (its hash is the signed plan's meta.evidence_hash)
            "evidence": used,
        }
        return Proposal(body, True, _ms_since(started))

    async def _preview(
        self, plan_id: str, user_id: str, observe: Observe
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """The new plan's preview, or the problem document of its refusal."""
        start = time.perf_counter()
        try:
            return await self.runs.preview(plan_id, user_id), None
        except CountersignError as e:
            status = status_for(e)
            return None, problem(status, e.code, type(e).__doc__ or e.code, e.message)
        finally:
            observe("preview", time.perf_counter() - start)

    async def revise(
        self,
        parent: str,
        changes: Mapping[str, Any],
        user_id: str,
        *,
        observe: Observe = unobserved,
    ) -> Proposal:
        """A revision: the plan's intent with ``changes`` (``None`` drops an entity), planned,
        signed and previewed as a new plan that names the one it revises."""
        body = await asyncio.to_thread(self.revision_body, parent, user_id, changes)
        proposal = await self.propose(body, user_id, observe=observe)
        return await self._linked(parent, proposal, user_id, sorted(changes), {"reason": "edited"})

    async def replan(
        self, plan_id: str, drop: Sequence[str], user_id: str, *, observe: Observe = unobserved
    ) -> Proposal:
        """The same request planned again without the evidence items named in ``drop`` (the
        card's "drop and re-plan"): a revision naming the plan it revises."""
        body = await asyncio.to_thread(self.replan_body, plan_id, user_id)
        proposal = await self.propose(body, user_id, drop=drop, observe=observe)
        dropped = sorted(set(drop))
        why = {"reason": "evidence_dropped", "dropped": dropped}
        out = await self._linked(plan_id, proposal, user_id, ["evidence"], why)
        out.body["dropped"] = dropped
        return out

    async def after_failure(
        self,
        plan_id: str,
        user_id: str,
        failure: Mapping[str, Any] | None,
        error: BaseException | None,
        *,
        observe: Observe = unobserved,
    ) -> str | None:
        """After a failed execute: when the failure table says ``replan`` (``failure``, the
        report's, or the class of ``error``), the same request planned again with fresh evidence
        as a revision whose reason is the failure. Its plan id, or None (another action, or a
        re-plan that could not be made: the failure stands as it is)."""
        if failure is None and error is not None:
            found = classify_error(error)
            if found is None:
                return None
            action = action_after(failure_actions(self.policy), found)
            failure = {**found.to_json(), "action": action, "step": found.step}
        if failure is None or failure.get("action") != "replan":
            return None
        why = {
            "reason": "failure",
            "failure": {k: failure[k] for k in ("class", "reason", "step") if k in failure},
        }
        try:
            body = await asyncio.to_thread(self.replan_body, plan_id, user_id)
            proposal = await self.propose(body, user_id, observe=observe)
        except CountersignError:
            return None  # the plan cannot be planned again now; the failure is on its card
        child = proposal.body.get("plan_id")
        await self._linked(plan_id, proposal, user_id, ["failure"], why)
        return str(child) if child else None

    async def _linked(
        self,
        parent: str,
        proposal: Proposal,
        user_id: str,
        changed: list[str],
        why: Mapping[str, Any],
    ) -> Proposal:
        """A planned revision is recorded as revising ``parent`` (audited on both plans), with
        why it was made (``why``: ``reason`` — edited, evidence_dropped — and its details)."""
        child = proposal.body.get("plan_id")
        if child:
            await asyncio.to_thread(self.revised, parent, child, user_id, changed, why)
            proposal.body["revises"] = {"plan_id": parent, "changed": changed}
        return proposal

    def revision_body(
        self, plan_id: str, user_id: str, changes: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The intent body of a revision of the caller's plan: its intent, entities and time zone
        with ``changes`` applied (``null`` drops an entity). What the plan sends is signed, so a
        change of constraints (a watcher's window, the consulate) is a new plan — planned, signed,
        previewed and approved like any other; ``revised`` links the two."""
        document = self.views.document(plan_id, user_id)
        plan = verify_signed_plan(document, keys=self.keyring).plan
        if not changes:
            raise InputError(f"revise plan {plan_id}: no change given")
        spec = self.runtime.registry.intents.get(plan.intent.intent)
        known = {e.name for e in (*spec.required, *spec.optional)} if spec else set()
        unknown = sorted(set(changes) - known)
        if unknown:
            raise InputError(
                f"revise plan {plan_id}: intent {plan.intent.intent!r} has no entit"
                f"{'y' if len(unknown) == 1 else 'ies'} {unknown}; it has {sorted(known)}"
            )
        entities = {**plan.intent.entities, **changes}
        return {
            "intent": plan.intent.intent,
            "entities": {k: v for k, v in entities.items() if v is not None},
            "tz": plan.intent.tz,
        }

    def replan_body(self, plan_id: str, user_id: str) -> dict[str, Any]:
        """The intent body that plans the caller's plan again (same request, fresh evidence)."""
        plan = verify_signed_plan(self.views.document(plan_id, user_id), keys=self.keyring).plan
        return {
            "intent": plan.intent.intent,
            "entities": dict(plan.intent.entities),
            "constraints": dict(plan.intent.constraints),
            "tz": plan.intent.tz,
            "context_budget": plan.intent.context_budget,
        }

    def revised(
        self,
        parent: str,
        child: str,
        user_id: str,
        changed: Sequence[str],
        why: Mapping[str, Any] | None = None,
    ) -> None:
        """Record that ``child`` revises ``parent`` and why (audited on both plans' event
        streams; ``GET /v1/plans/{id}/revisions`` reads them as a tree)."""
        extra = dict(why or {})
        with self.db.tx() as c:
            for pid, details in (
                (child, {"revises": parent, "changed": [*changed], **extra}),
                (parent, {"revised_by": child, "changed": [*changed], **extra}),
            ):
                self.audit.append(
                    c,
                    {
                        "kind": "plan_revised",
                        "status": "ok",
                        "actor": user_id,
                        "plan_id": pid,
                        "details": details,
                    },
                )


def _ms_since(started: float) -> float:
    return (time.perf_counter() - started) * 1000
