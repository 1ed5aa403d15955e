"""The engines behind the HTTP API and the CLI verbs, composed once (an adapter: no HTTP here).

Every method takes the caller (``user_id``) and answers only for that caller's plans: another
user's plan is indistinguishable from a missing one (``PlanNotFoundError``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError
from ulid import ULID

from countersign.approvals import Approvals
from countersign.audit import AuditLog
from countersign.contextrag import ForgetChangedError, ForgetTargets, MemoryStore
from countersign.durable import (
    ApproveGate,
    PlanExecutionWorkflow,
    RejectGate,
    WatcherWorkflow,
    durable_starter,
)
from countersign.execute import ExecuteRefusedError, ExecuteReport, Executor, writes_before_gate
from countersign.intake import Contact, Intake, IntentProposer, Understanding
from countersign.kernel import (
    CountersignError,
    Evidence,
    InputError,
    Intent,
    Needs,
    Plan,
    Policy,
    ascii_digits,
    format_utc,
    parse_contract,
)
from countersign.n8n import N8nClient
from countersign.planner import make_plan
from countersign.planwriter import PlanWriter
from countersign.preview import run_preview
from countersign.registry import Registry
from countersign.sandbox import DEMO_PEOPLE
from countersign.signer import (
    KeyRing,
    ReceiptKeySigner,
    make_bundle,
    sign_plan,
    verify_signed_plan,
)
from countersign.steps import (
    ChoiceError,
    OverBudgetError,
    StepTransport,
    StoreRecorder,
    check_budget,
    check_choice,
    check_current,
    gate_offer,
    offered_choices,
)
from countersign.storage import Database, PlanStore, stored_document
from countersign.workflowbuilder import CredentialRef

from .conversations import Conversation, ConversationStore
from .core import TERMINAL, PlanState, decode_cursor, encode_cursor, ended_outcome, fold_events
from .errors import (
    DurableUpdateError,
    ForgetIncompleteError,
    PlanCancelledError,
    PlanFinishedError,
    PlanNotFoundError,
    TemporalUnavailableError,
    UserMismatchError,
)
from .events import EventLog
from .reads import Reads

__all__ = ["PlanService", "execution_matcher", "gates_of"]

_PLAN_ID = SearchAttributeKey.for_keyword("plan_id")
#: runtime records as JSON objects (``list`` is a method name inside PlanService)
_Records = list[dict[str, Any]]


@dataclass
class PlanService:
    """Plan, store, preview, approve, execute and cancel — for one caller at a time."""

    db: Database
    registry: Registry
    keyring: KeyRing
    policy: Policy
    transport: StepTransport | None
    connector_settings: Mapping[str, str]
    clock: Callable[[], datetime]
    credentials: Mapping[str, CredentialRef] = field(default_factory=dict)
    durable: Callable[[dict[str, Any], str], Awaitable[str]] | None = None
    signer_name: str = "planner@system"
    #: hot single-statement reads (plan views, events) on the read pool when given
    reads: Reads | None = None
    #: the people chat text may name (the sandbox's demo people by default)
    contacts: list[Contact] = field(
        default_factory=lambda: [Contact(e.split("@")[0].title(), e) for e in DEMO_PEOPLE]
    )
    #: the time zone chat text is read in
    tz: str = "UTC"
    #: a model that proposes the intent of chat text (``COUNTERSIGN_LLM_MODEL``); None = the
    #: deterministic Intake alone
    proposer: IntentProposer | None = None
    #: the Temporal client durable plans run on (``use_temporal``)
    temporal: Client | None = None
    #: the context budget of intents read from chat (T1–T5; T5 still needs recorded consent)
    chat_context_budget: int = 5
    #: outcomes → history and the PlanLibrary; None = one over ``db`` with the offline embedder
    #: (entry points pass ``PlanWriter.for_settings``: the configured embedder, checked at start)
    plan_writer: PlanWriter | None = None

    def __post_init__(self) -> None:
        self.audit = AuditLog(clock=self.clock)
        self.plans = PlanStore(self.db, clock=self.clock)
        self.recorder = StoreRecorder(self.db, clock=self.clock)
        # every gate decision is a receipt signed by the service key (Approvals SPEC §4)
        self.approvals = Approvals(
            self.db, clock=self.clock, audit=self.audit, receipts=ReceiptKeySigner(self.keyring)
        )
        self.events = EventLog(self.db, self.reads)
        self.conversations = ConversationStore(self.db, clock=self.clock)
        self.intake = Intake(self.registry, threshold=self.policy.intake_threshold)
        self.executor = Executor(
            keys=self.keyring,
            registry=self.registry,
            transport=self.transport,
            db=self.db,
            settings=self.connector_settings,
            credentials=self.credentials,
            clock=self.clock,
            durable=self.durable,
            plan_writer=self.plan_writer or PlanWriter.for_database(self.db, clock=self.clock),
        )

        # ContextRAG's exemplar source: the PlanLibrary that PlanWriter keeps, when the executor
        # has one (exemplar evidence, PlanLibrary SPEC §4); none → no exemplar items
        library = getattr(getattr(self.executor, "plan_writer", None), "library", None)
        self.memory = MemoryStore(self.db, clock=self.clock, exemplars=library)

    def use_transport(self, transport: StepTransport | None) -> None:
        """Where steps run from now on (the API opens its n8n client when it starts)."""
        self.transport = transport
        self.executor.transport = transport

    def use_temporal(self, client: Client) -> None:
        """Durable plans go to Temporal through ``client`` (execute hands them off; approving,
        rejecting or cancelling a running one sends the workflow its update or signal)."""
        self.temporal = client
        self.executor.durable = durable_starter(client)

    def _workflow_of(self, plan_id: str) -> str | None:
        """The Temporal workflow a plan was handed to (from its ``handed_off`` event)."""
        wid = None
        for e in self.events.since(plan_id, 0, limit=10_000):
            if e["kind"] == "handed_off" and isinstance(e.get("details"), Mapping):
                wid = e["details"].get("workflow_id")
        return str(wid) if wid else None

    async def _update(self, plan_id: str, wid: str, name: str, arg: Any) -> Any:
        if self.temporal is None:
            raise DurableUpdateError(
                f"plan {plan_id} runs on Temporal ({wid}) and this service has no Temporal client"
            )
        handle = self.temporal.get_workflow_handle(wid)
        workflow = WatcherWorkflow if wid.startswith("watch-") else PlanExecutionWorkflow
        try:
            return await handle.execute_update(getattr(workflow, name), arg)
        except WorkflowUpdateFailedError as e:
            cause = str(e.cause) if e.cause is not None else str(e)
            raise DurableUpdateError(f"{wid} refused {name}: {cause}") from e
        except RPCError as e:
            raise DurableUpdateError(f"{wid}: {e.message}") from e

    def use_registry(self, registry: Registry) -> None:
        """Plan, preview and execute against this registry from now on (plans signed against
        another version are refused: ``registry_changed``)."""
        self.registry = registry
        self.executor.registry = registry
        self.intake = Intake(registry, threshold=self.policy.intake_threshold)

    def use_credentials(self, credentials: Mapping[str, CredentialRef]) -> None:
        """The n8n credentials generated nodes use (the API learns them when n8n is up)."""
        self.credentials = dict(credentials)
        self.executor.credentials = self.credentials

    def understand(self, text: str, conv: Conversation, *, tz: str | None = None) -> Understanding:
        """Read one chat message in its conversation (what earlier turns settled carries over;
        while no intent is settled, every message of the conversation is read together)."""
        said = text if conv.intent else " ".join([*conv.person_texts, text])
        return self.intake.understand(
            said,
            received_at=self.clock(),
            tz=tz or self.tz,
            contacts=self.contacts,
            intent=conv.intent,
            known=conv.entities,
            proposer=self.proposer,
        )

    # ---- intents -------------------------------------------------------------------------------
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

    def plan(self, intent: Intent, user_id: str) -> dict[str, Any] | Needs:
        """Plan, sign, verify and store (with its ``plan_signed`` event); or what is missing."""
        return self.plan_with_evidence(intent, user_id)[0]

    def evidence(self, intent: Intent, *, exclude: Sequence[str] = ()) -> list[Evidence]:
        """ContextRAG's evidence for this intent (its ``context_budget``, the caller's memory
        and consent; ``exclude``: source refs the person dropped)."""
        spec = self.registry.intents.get(intent.intent)
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

    def plan_with_evidence(
        self, intent: Intent, user_id: str, *, exclude: Sequence[str] = ()
    ) -> tuple[dict[str, Any] | Needs, list[Evidence]]:
        """As :meth:`plan`, with the evidence the plan was made from (its hash is signed)."""
        evidence = self.evidence(intent, exclude=exclude)
        out = make_plan(intent, evidence, self.registry, self.policy)
        if isinstance(out, Needs):
            return out, evidence
        pid, key = self.keyring.active()
        signed = sign_plan(out, key=key, pubkey_id=pid, signer=self.signer_name)
        self.recorder.remember(verify_signed_plan(signed, keys=self.keyring), actor=user_id)
        return signed.to_json(), evidence

    # ---- reading -------------------------------------------------------------------------------
    def _row(self, plan_id: str, user_id: str) -> dict[str, Any]:
        # by id AND owner in one lookup: another user's plan is not found exactly like a missing
        # one, in its answer and in its time (Api SPEC, only your own plans)
        row: dict[str, Any] | None = None
        if _plan_id_ok(plan_id):
            row = (
                self.reads.plan(plan_id, user_id)
                if self.reads is not None
                else self.plans.get(plan_id, owner=user_id)
            )
        if row is None or row["user_id"] != user_id:
            raise PlanNotFoundError(f"no plan {plan_id[:40]!r}")
        return row

    def receipts(self, plan_id: str, user_id: str) -> dict[str, Any]:
        """The plan's receipt bundle (Signer SPEC §5): the signed plan as stored, its receipt
        chain, a head signed now, the public keys — verifiable offline."""
        document = self.document(plan_id, user_id)
        chain = self.approvals.receipt_chain(plan_id)
        signer = ReceiptKeySigner(self.keyring)
        return make_bundle(document, chain, signer=signer, exported_at=self.clock())

    def document(self, plan_id: str, user_id: str) -> dict[str, Any]:
        """The stored signed plan of ``user_id`` (as stored: verification happens on use)."""
        return stored_document(self._row(plan_id, user_id))

    def show(self, plan_id: str, user_id: str) -> dict[str, Any]:
        """The signed plan, its status, per-step status and results, and its gates."""
        row = self._row(plan_id, user_id)
        document = stored_document(row)
        events = row.get("events")
        state = fold_events(events) if events is not None else self.events.state(plan_id)
        outputs = {int(s["step"]): s.get("output") for s in row.get("steps", [])}
        graph: list[dict[str, Any]] = document["plan"].get("graph", [])
        offers = self._choices_of(document, row)
        steps = [
            {
                "step": s["step"],
                "uses": s["uses"],
                "call": s["call"],
                "role": s["role"],
                "mode": s["mode"],
                "gate_id": s.get("gate_id"),
                "status": _step_status(s, state),
                "output": outputs.get(s["step"]),
            }
            for s in graph
        ]
        return {
            "plan_id": plan_id,
            **document,
            "status": state.status,
            "steps": steps,
            "gates": [{**g, "choices": offers.get(g["gate_id"])} for g in gates_of(graph, state)],
            "workflow_id": state.workflow_id,
            "events": state.last_seq,
        }

    def list(self, user_id: str, *, limit: int, cursor: str | None) -> dict[str, Any]:
        """The caller's plans, newest first; ``next_cursor`` when there are more."""
        where, params = "user_id = :u", {"u": user_id, "n": limit + 1}
        if cursor:
            at, pid = decode_cursor(cursor)
            where += " AND (created_at, plan_id) < (:at, :pid)"
            params |= {"at": at, "pid": pid}
        with self.db.tx() as c:
            rows = list(
                c.execute(
                    text(
                        f"SELECT plan_id, intent, created_at FROM plans WHERE {where} "  # noqa: S608 - fixed text
                        "ORDER BY created_at DESC, plan_id DESC LIMIT :n"
                    ),
                    params,
                ).mappings()
            )
        more = len(rows) > limit
        rows = rows[:limit]
        items = [
            {
                "plan_id": r["plan_id"],
                "intent": r["intent"],
                "created_at": format_utc(r["created_at"]),
                "status": self.events.state(r["plan_id"]).status,
            }
            for r in rows
        ]
        last = rows[-1] if rows else None
        return {
            "items": items,
            "next_cursor": encode_cursor(last["created_at"], last["plan_id"])
            if more and last
            else None,
        }

    # ---- acting --------------------------------------------------------------------------------
    async def preview(self, plan_id: str, user_id: str) -> dict[str, Any]:
        """Run the read-only preview (on n8n); the Preview wrapper."""
        document = self.document(plan_id, user_id)
        self._not_cancelled(plan_id)
        if self.transport is None:
            raise PlanCancelledError("no step runtime is configured for previews")
        result = await run_preview(
            document,
            keys=self.keyring,
            registry=self.registry,
            transport=self.transport,
            recorder=self.recorder,
            settings=self.connector_settings,
            credentials=self.credentials,
            actor=user_id,
            now=self.clock(),
        )
        return result.wrapper.to_json()

    async def approve(
        self, plan_id: str, gate_id: str, user_id: str, *, choice: Any = None
    ) -> dict[str, Any]:
        """A token for one gate (bound to the plan hash, the gate and the caller). A plan running
        on Temporal gets it at once (the workflow's ``approve_gate`` update spends it)."""
        out = self.issue_token(plan_id, gate_id, user_id, choice=choice)
        wid = self._workflow_of(plan_id)
        if wid is not None:
            gate = ApproveGate(gate_id=gate_id, token=out["token"])
            out["durable"] = {
                "workflow_id": wid,
                "result": await self._update(plan_id, wid, "approve_gate", gate),
            }
        return out

    def issue_token(
        self, plan_id: str, gate_id: str, user_id: str, *, choice: Any = None
    ) -> dict[str, Any]:
        """A token for one gate, without sending it anywhere."""
        document = self.document(plan_id, user_id)
        self._not_cancelled(plan_id)
        verified = verify_signed_plan(document, keys=self.keyring)
        plan = verified.plan
        check_current(plan, registry_version=self.registry.version, now=self.clock())
        gates = {s.gate_id for s in plan.graph if s.gate_id}
        if gate_id not in gates:
            raise InputError(
                f"plan {plan_id} has no gate {gate_id[:16]!r}; its gates: {sorted(gates)}"
            )
        row = self.plans.get(plan_id)  # one read for the three checks
        self._in_view(plan, gate_id, user_id, row)
        self._within_budget(plan, gate_id, user_id, row)
        choice = self._offered(plan, gate_id, user_id, choice, row)
        token = self.approvals.issue(
            plan_id=plan_id,
            plan_hash=verified.plan_hash,
            gate_id=gate_id,
            user_id=user_id,
            scopes=plan.constraints.scopes,
            ttl_s=self.policy.approval_ttl_s,
            choice=choice,
            not_after=plan.meta.created_at + _ttl(plan),
        )
        return {
            "token": token.token,
            "gate_id": gate_id,
            "expires_at": format_utc(token.exp),
        }

    def seen_outputs(self, plan: Plan, row: Mapping[str, Any] | None = None) -> dict[int, Any]:
        """What the person has seen of the plan's steps: the stored preview (refreshed when an
        execute waits at a later gate), the writes done, and what a watcher found (``row``: the
        plan's stored row — steps with status and fingerprint, and its events when it carries
        them — when the caller has it)."""
        row = row if row is not None else self.plans.get(plan.plan_id)
        outputs: dict[int, Any] = {
            int(s["step"]): s["output"]
            for s in (row or {}).get("steps", [])
            if s["status"] == "done" and s["output"] is not None
        }
        outputs.update(PlanStore.preview_in(row)[0])
        if not any(s.role == "Watcher" for s in plan.graph):
            return outputs
        events = (row or {}).get("events")
        if events is None:
            events = self.events.since(plan.plan_id, 0, limit=10_000)
        for e in events:
            found = (e.get("details") or {}).get("found") if e["kind"] == "watcher_polled" else None
            if isinstance(found, Mapping) and e.get("step") is not None:
                # the run acts on the first slot it found (the one it holds and books)
                outputs[int(e["step"])] = {
                    k: v[:1] if isinstance(v, list) else v for k, v in found.items()
                }
        return outputs

    def gate_choices(
        self, plan: Plan, row: Mapping[str, Any] | None = None
    ) -> dict[str, dict[str, Any]]:
        """Per gate: whether it takes a choice and the choices it accepts now (the card shows
        these and nothing else; the approve call checks the same)."""
        outputs = self.seen_outputs(plan, row)
        out: dict[str, dict[str, Any]] = {}
        for s in plan.graph:
            if s.gate_id is None:
                continue
            offer = gate_offer(plan, self.registry, s.gate_id, outputs)
            out[s.gate_id] = {
                "takes_choice": offer.takes_choice,
                "kind": offer.spec.kind if offer.spec else None,
                "step": offer.step,
                "seen": offer.seen,
                "duration_min": int(offer.duration.total_seconds() // 60)
                if offer.duration
                else None,
                "options": offered_choices(offer, now=self.clock()),
            }
        return out

    def _in_view(
        self, plan: Plan, gate_id: str, user_id: str, row: Mapping[str, Any] | None
    ) -> None:
        """A gate that depends on an earlier gate's writes is approved only after they ran
        (ARCHITECTURE §3 inv. 3): otherwise refused (409 ``execute_refused``), audited."""
        done = {int(s["step"]) for s in (row or {}).get("steps", []) if s["status"] == "done"}
        pending = [w for w in writes_before_gate(plan, self.registry, gate_id) if w not in done]
        if not pending:
            return
        self._approval_refused(plan, gate_id, user_id, "gate_not_in_view", pending_writes=pending)
        raise ExecuteRefusedError(
            f"plan {plan.plan_id}: {gate_id} guards what follows steps {pending}, which have not "
            "run yet; approve and execute the earlier gate first, then this one with its review "
            "in view"
        )

    def _choices_of(
        self, document: Mapping[str, Any], row: Mapping[str, Any]
    ) -> dict[str, dict[str, Any]]:
        """``gate_choices`` of a stored plan from the row already read; empty when it no longer
        fits the registry held (the approve call then says why)."""
        try:
            return self.gate_choices(Plan.model_validate(document["plan"]), row)
        except (CountersignError, KeyError, ValueError):
            return {}

    def _offered(
        self, plan: Plan, gate_id: str, user_id: str, choice: Any, row: Mapping[str, Any] | None
    ) -> Any:
        """The canonical choice if the gate offered it (GLOBAL_SPEC §8, the choice at a gate);
        otherwise ``ChoiceError`` naming the field, audited as ``approval_refused``."""
        offer = gate_offer(plan, self.registry, gate_id, self.seen_outputs(plan, row))
        try:
            return check_choice(offer, choice, now=self.clock())
        except ChoiceError as e:
            self._approval_refused(plan, gate_id, user_id, e.code, field=e.field)
            raise

    def _approval_refused(
        self, plan: Plan, gate_id: str, user_id: str, reason: str, **details: Any
    ) -> None:
        """Audit an approve call refused before a token was issued."""
        with self.db.tx() as c:
            self.audit.append(
                c,
                {
                    "kind": "approval_refused",
                    "status": "refused",
                    "actor": user_id,
                    "plan_id": plan.plan_id,
                    "op": gate_id,
                    "reason": reason,
                    "details": details,
                },
            )

    def _within_budget(
        self, plan: Plan, gate_id: str, user_id: str, row: Mapping[str, Any] | None
    ) -> None:
        """A gate whose writes declare a budget is not approved while what would be charged now
        (reported by the writes done so far) is over it: refused with ``over_budget``, audited."""
        outputs = {
            int(s["step"]): s["output"]
            for s in (row or {}).get("steps", [])
            if s["status"] == "done" and s["output"] is not None
        }
        try:
            check_budget(plan, self.registry, gate_id, outputs)
        except OverBudgetError as e:
            with self.db.tx() as c:
                self.audit.append(
                    c,
                    {
                        "kind": "approval_refused",
                        "status": "refused",
                        "actor": user_id,
                        "plan_id": plan.plan_id,
                        "step": e.step,
                        "op": gate_id,
                        "reason": e.code,
                        "details": {"limit": e.limit, "total": e.total},
                    },
                )
            raise

    async def reject(
        self, plan_id: str, gate_id: str, user_id: str, *, reason: str | None
    ) -> dict[str, Any]:
        """Reject a gate: nothing it guards will run (a running workflow records it itself)."""
        document = self.document(plan_id, user_id)
        wid = self._workflow_of(plan_id)
        if wid is not None:
            result = await self._update(
                plan_id, wid, "reject_gate", RejectGate(gate_id=gate_id, reason=reason)
            )
            return {
                "gate_id": gate_id,
                "decision": "rejected",
                "durable": {"workflow_id": wid, "result": result},
            }
        verified = verify_signed_plan(document, keys=self.keyring)
        self.approvals.reject(
            plan_id=plan_id,
            plan_hash=verified.plan_hash,
            gate_id=gate_id,
            user_id=user_id,
            reason=reason,
        )
        return {"gate_id": gate_id, "decision": "rejected"}

    async def execute(self, plan_id: str, user_id: str, tokens: Mapping[str, str]) -> ExecuteReport:
        """Execute with the given gate tokens (each spent now). A revision that was handed to
        Temporal replaces its parent: the parent's run is cancelled then (not before, so the
        person never stops watching while they look at the revised card)."""
        document = self.document(plan_id, user_id)
        self._not_cancelled(plan_id)
        report = await self.executor.execute(document, user_id=user_id, tokens=tokens)
        parent = self.parent_of(plan_id)
        if report.status == "handed_off" and parent is not None:
            with contextlib.suppress(PlanCancelledError, DurableUpdateError):  # ended already
                self._not_cancelled(parent)
                await self.cancel(parent, user_id)
        return report

    def revision_body(
        self, plan_id: str, user_id: str, changes: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The intent body of a revision of the caller's plan: its intent, entities and time zone
        with ``changes`` applied (``null`` drops an entity). What the plan sends is signed, so a
        change of constraints (a watcher's window, the consulate) is a new plan — planned, signed,
        previewed and approved like any other; ``revised`` links the two."""
        document = self.document(plan_id, user_id)
        plan = verify_signed_plan(document, keys=self.keyring).plan
        if not changes:
            raise InputError(f"revise plan {plan_id}: no change given")
        spec = self.registry.intents.get(plan.intent.intent)
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
        plan = verify_signed_plan(self.document(plan_id, user_id), keys=self.keyring).plan
        return {
            "intent": plan.intent.intent,
            "entities": dict(plan.intent.entities),
            "constraints": dict(plan.intent.constraints),
            "tz": plan.intent.tz,
            "context_budget": plan.intent.context_budget,
        }

    async def forget(self, user_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Forget the caller's data or one subject (ContextRAG SPEC §4). The runtimes' records
        go first — the Temporal runs of the plans it takes (a running watcher stops writing),
        then the n8n executions that hold it — while the rows that name those plans still
        exist; then every table, the audit rows redacted, audited with the counts. A runtime
        that cannot be erased stops it before any row is deleted: audited
        (``memory_forget_incomplete``, no content) and refused with ``forget_incomplete`` (503);
        the same forget again finishes the job."""
        for _ in range(3):
            targets = await asyncio.to_thread(self.memory.forget_targets, user_id, body)
            erased: dict[str, int | None] = {}
            pending: dict[str, str] = {}
            try:
                erased["temporal_runs_deleted"] = await self._erase_runs(list(targets.plan_ids))
            except CountersignError as e:
                pending["temporal"] = e.code
            try:
                erased["n8n_executions_deleted"] = await self._erase_executions(targets)
            except CountersignError as e:
                pending["n8n"] = e.code
            if pending:
                await asyncio.to_thread(
                    self.memory.forget_incomplete,
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
            try:
                out = await asyncio.to_thread(
                    self.memory.forget,
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

    async def _erase_runs(self, plan_ids: Sequence[str]) -> int | None:
        """Delete the Temporal runs of these plans (every run of a ContinueAsNew chain; a running
        one is terminated first by the server), found by the ``plan_id`` search attribute."""
        if self.temporal is None:
            return None  # no Temporal configured: nothing ran there
        deleted = 0
        for i in range(0, len(plan_ids), 50):
            # plan ids are checked ULIDs, so they can be quoted into the visibility query
            query = "plan_id IN (" + ", ".join(f"'{p}'" for p in plan_ids[i : i + 50]) + ")"
            try:
                async for wf in self.temporal.list_workflows(query):
                    await self.temporal.workflow_service.delete_workflow_execution(
                        DeleteWorkflowExecutionRequest(
                            namespace=self.temporal.namespace,
                            workflow_execution=WorkflowExecution(
                                workflow_id=wf.id, run_id=wf.run_id
                            ),
                        )
                    )
                    deleted += 1
            except RPCError as e:
                raise TemporalUnavailableError(
                    f"forget: Temporal could not list or delete runs ({e.status.name}): {e.message}"
                ) from e
        return deleted

    async def _executions_of(
        self, plan_ids: Sequence[str], *, mentioning: tuple[Sequence[str], str] | None = None
    ) -> _Records | None:
        """The n8n executions of these plans: those whose data holds one of ``plan_ids`` as a
        whole word (every step call carries its plan id), or, with ``mentioning`` (more plan
        ids, a subject), one of those that also mentions the subject. None: no n8n runtime.
        An execution that holds none of the plan ids is another person's or the system's,
        even when it mentions the person (ContextRAG SPEC §4)."""
        client = getattr(self.transport, "client", None)
        if not isinstance(client, N8nClient):
            return None  # no n8n runtime configured: nothing ran there
        wholly = execution_matcher([p.lower() for p in plan_ids]) if plan_ids else None
        others, subject = mentioning or ((), "")
        partly = execution_matcher([p.lower() for p in others]) if others else None
        names = execution_matcher([subject.lower()]) if subject else None
        if wholly is None and (partly is None or names is None):
            return []
        # whole words only: forgetting "local" must not take every execution that mentions
        # "localhost" (a plan id, an e-mail, a subject still match inside URLs and text)
        found: _Records = []
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

    async def _erase_executions(self, targets: ForgetTargets) -> int | None:
        """Delete the person's n8n executions a forget takes (:meth:`_executions_of`)."""
        client = getattr(self.transport, "client", None)
        mentioning = (targets.own_plan_ids, targets.subject) if targets.subject else None
        found = await self._executions_of(targets.plan_ids, mentioning=mentioning)
        if found is None or not isinstance(client, N8nClient):
            return None
        for ex in found:
            await client.delete_execution(str(ex["id"]))
        return len(found)

    async def _runs_of(self, plan_ids: Sequence[str]) -> _Records | None:
        """Summaries of the Temporal runs of these plans (None: no Temporal client)."""
        if self.temporal is None:
            return None
        runs: _Records = []
        for i in range(0, len(plan_ids), 50):
            query = "plan_id IN (" + ", ".join(f"'{p}'" for p in plan_ids[i : i + 50]) + ")"
            try:
                async for wf in self.temporal.list_workflows(query):
                    plan = wf.typed_search_attributes.get(_PLAN_ID)
                    runs.append(
                        {
                            "workflow_id": wf.id,
                            "run_id": wf.run_id,
                            "workflow_type": wf.workflow_type,
                            "plan_id": plan,
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

    async def export(self, user_id: str) -> dict[str, Any]:
        """Everything stored about the caller (ContextRAG SPEC §4): every row of theirs in the
        tables, and a summary of each runtime record a forget of everything would erase — the
        n8n executions of their plans (id, workflow id and name, times, status) and the
        Temporal runs of their plans (ids, type, status, times). A runtime that cannot be read
        is named under ``runtimes.<store>.error`` and ``complete`` is false."""
        out = await asyncio.to_thread(self.memory.export, user_id)
        plan_ids = [str(p["plan_id"]) for p in out["tables"].get("plans", [])]
        runtimes: dict[str, Any] = {}
        try:
            found = await self._executions_of(plan_ids)
            runtimes["n8n"] = (
                None
                if found is None
                else {"executions": sorted((_execution_summary(e) for e in found), key=_by_id)}
            )
        except CountersignError as e:
            runtimes["n8n"] = {"error": e.code}
        try:
            runs = await self._runs_of(plan_ids)
            runtimes["temporal"] = None if runs is None else {"runs": runs}
        except CountersignError as e:
            runtimes["temporal"] = {"error": e.code}
        out["runtimes"] = runtimes
        out["complete"] = not any(isinstance(v, dict) and "error" in v for v in runtimes.values())
        return out

    def revised(self, parent: str, child: str, user_id: str, changed: Sequence[str]) -> None:
        """Record that ``child`` revises ``parent`` (audited on both plans' event streams)."""
        with self.db.tx() as c:
            for pid, details in (
                (child, {"revises": parent, "changed": [*changed]}),
                (parent, {"revised_by": child, "changed": [*changed]}),
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

    def parent_of(self, plan_id: str) -> str | None:
        """The plan ``plan_id`` revises, if any."""
        with self.db.tx() as c:
            row = c.execute(
                text(
                    "SELECT details->>'revises' FROM audit_log WHERE plan_id = :p "
                    "AND kind = 'plan_revised' AND details ? 'revises' ORDER BY seq DESC LIMIT 1"
                ),
                {"p": plan_id},
            ).scalar()
        return str(row) if row else None

    async def cancel(self, plan_id: str, user_id: str) -> dict[str, Any]:
        """Cancel: no later preview, approval or execute of this plan runs (audited); a run on
        Temporal is cancelled through Temporal's own cancellation — the one cancel path, the same
        as the UI's "Request Cancellation": the workflow records the outcome and ends CANCELED.
        A plan that already ended is not cancelled: ``PlanFinishedError`` (409) names its status
        (a completed plan's writes happened; calling it cancelled would lie)."""
        self.document(plan_id, user_id)
        status = self.events.state(plan_id).status
        if status in TERMINAL:
            raise PlanFinishedError(
                f"plan {plan_id} is already {status}: there is nothing left to cancel"
                + ("; what it wrote stays written" if status == "completed" else "")
            )
        wid = self._workflow_of(plan_id)
        if wid is not None and self.temporal is not None:
            handle = self.temporal.get_workflow_handle(wid)
            try:
                await handle.cancel()
            except RPCError as e:
                raise DurableUpdateError(f"{wid}: {e.message}") from e
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

    async def reconcile_durable(
        self, *, actor: str = "reconciler", closed_since: datetime | None = None
    ) -> tuple[dict[str, str], ...]:
        """Runs handed to Temporal that ended without recording it — terminated from the Temporal
        UI or CLI (Terminate runs no workflow code), timed out, or lost — get their end recorded
        now: ``durable_finished`` with how Temporal says they ended, and the plan's status.
        Running runs are left alone; each end is recorded once (a lock per plan, re-checked).

        Without ``closed_since`` (the API's start, ``countersign reconcile``) every such plan's
        run is described; with it (the API's periodic pass) one visibility query lists the runs
        closed since then, so a pass costs one SQL query and one list call however many runs
        are still watching. Returns what was recorded."""
        if self.temporal is None:
            return ()
        with self.db.tx() as c:
            rows = c.execute(
                text(
                    "SELECT h.plan_id, h.details->>'workflow_id' AS wid FROM plan_events h "
                    "WHERE h.kind = 'handed_off' AND NOT EXISTS (SELECT 1 FROM plan_events f "
                    "WHERE f.plan_id = h.plan_id AND f.kind = 'durable_finished')"
                )
            ).all()
        pending = {str(wid): str(plan_id) for plan_id, wid in rows if wid}
        if not pending:
            return ()
        ended: dict[str, str] = {}
        try:
            if closed_since is None:
                for wid in pending:
                    desc = await self.temporal.get_workflow_handle(wid).describe()
                    ended[wid] = desc.status.name if desc.status else ""
            else:
                since = closed_since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                async for run in self.temporal.list_workflows(
                    f'CloseTime >= "{since}" AND ExecutionStatus != "Running"'
                ):
                    if run.id in pending and run.status is not None:
                        ended[run.id] = run.status.name
        except RPCError as e:
            raise DurableUpdateError(f"reconciling durable runs: {e.message}") from e
        done: tuple[dict[str, str], ...] = ()
        for wid, status in ended.items():
            known = ended_outcome(status)
            if known is None:
                continue
            outcome, plan_status = known
            plan_id = pending[wid]
            with self.db.tx() as c:
                # a concurrent pass (the CLI while the API runs) records it once: the lock holds
                # until this transaction ends, and the second pass then finds the row
                c.execute(text("SELECT pg_advisory_xact_lock(hashtext(:p))"), {"p": plan_id})
                if c.execute(
                    text(
                        "SELECT 1 FROM plan_events WHERE plan_id = :p "
                        "AND kind = 'durable_finished' LIMIT 1"
                    ),
                    {"p": plan_id},
                ).first():
                    continue
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
            done += ({"plan_id": plan_id, "workflow_id": wid, "outcome": outcome},)
        return done

    def _not_cancelled(self, plan_id: str) -> None:
        if self.events.state(plan_id).status == "cancelled":
            raise PlanCancelledError(f"plan {plan_id} was cancelled")


def gates_of(graph: list[dict[str, Any]], state: PlanState) -> list[dict[str, Any]]:
    """Each gate, the step that carries it and its decision so far."""
    return [
        {
            "gate_id": s["gate_id"],
            "step": s["step"],
            "status": state.gates.get(
                s["gate_id"], "closed" if state.status in TERMINAL else "open"
            ),
        }
        for s in graph
        if s.get("gate_id")
    ]


#: a gate's state → its step's status
_GATE_STEP = {
    "passed": "succeeded",
    "spent": "succeeded",
    "rejected": "rejected",
    "closed": "skipped",
}


def _step_status(step: Mapping[str, Any], state: PlanState) -> str:
    """A step's status from the event log: its own events, or for a gate step its gate's."""
    if step["step"] in state.steps:
        return state.steps[step["step"]]
    gate = step.get("gate_id")
    if gate:
        return _GATE_STEP.get(state.gates.get(gate, ""), "pending")
    return "skipped" if state.status in TERMINAL else "pending"


def _ttl(plan: Plan) -> timedelta:
    return timedelta(seconds=plan.constraints.ttl_s)


def execution_matcher(needles: Sequence[str]) -> re.Pattern[str]:
    """What finds forgotten data in a runtime record (lower-cased JSON): any needle as a whole
    word — not inside a longer name (``local`` does not match ``localhost``)."""
    words = "|".join(re.escape(n.lower()) for n in needles)
    return re.compile(r"(?<![a-z0-9_])(?:" + words + r")(?![a-z0-9_])")


def _plan_id_ok(plan_id: str) -> bool:
    return len(plan_id) == 26 and plan_id.isalnum()


def _execution_summary(ex: Mapping[str, Any]) -> dict[str, Any]:
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


def _by_id(summary: Mapping[str, Any]) -> tuple[int, str]:
    eid = str(summary["execution_id"])
    return (int(eid), eid) if ascii_digits(eid) else (0, eid)
