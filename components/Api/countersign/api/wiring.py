"""The one place the Api's services are composed (Api LLD, wiring): every entry point — ``countersign
api`` and ``up`` (``stack.open_stack``), the CLI verbs, the tests' harness and the benchmarks —
calls :func:`build_services`, so each edge runs the same engines the same way.

Each service gets its collaborators here and builds none itself; the ones that change while the
API runs (step runtime, Temporal client, registry, n8n credentials) are held by one ``Runtime``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from temporalio.client import Client

from countersign.approvals import Approvals
from countersign.audit import AuditLog
from countersign.contextrag import MemoryStore
from countersign.durable import DurableReconciler
from countersign.execute import Executor
from countersign.intake import Contact, Intake, IntentProposer
from countersign.kernel import Policy
from countersign.planwriter import PlanWriter
from countersign.registry import Registry
from countersign.registry.store import RegistryStore
from countersign.signer import KeyRing, ReceiptKeySigner
from countersign.steps import StepTransport, StoreRecorder
from countersign.steps.policy import contacts_source
from countersign.storage import Database, PlanEvents, PlanStore, ReadPool
from countersign.workflowbuilder import CredentialRef

from .conversations import ConversationStore
from .services.chat import Chat
from .services.codec import CodecDesk
from .services.durable import DurableLink
from .services.gates import Gates
from .services.memory import Memory
from .services.planning import Planning
from .services.records import RuntimeRecords
from .services.registry import RegistryDesk
from .services.runs import Runs
from .services.runtime import Runtime
from .services.views import PlanViews

__all__ = ["Services", "build_services"]


@dataclass(frozen=True)
class Services:
    """The Api's use cases over one database, composed once."""

    db: Database
    runtime: Runtime
    views: PlanViews
    planning: Planning
    chat: Chat
    gates: Gates
    runs: Runs
    memory: Memory
    registry: RegistryDesk
    codec: CodecDesk
    clock: Callable[[], datetime]
    #: hot single-statement reads (plan views, events, key lookups) when given
    reads: ReadPool | None = None

    @property
    def events(self) -> PlanEvents:
        """The plans' event log (the SSE stream and ``countersign events`` read it)."""
        return self.views.events

    def reconciler(self, client: Client) -> DurableReconciler:
        """The durable runs' reconciler over this database (the API schedules its passes;
        ``countersign reconcile`` runs one)."""
        return DurableReconciler.for_database(client, self.db, clock=self.clock)

    async def reconcile(self, *, actor: str) -> tuple[dict[str, str], ...]:
        """One reconcile pass on the Temporal client the runtime holds (none: nothing to do)."""
        client = self.runtime.temporal
        return () if client is None else await self.reconciler(client).reconcile(actor=actor)


@dataclass(frozen=True)
class _Base:
    """What every use case is built over: the database, keys, policy, clock, stores, runtime."""

    db: Database
    keyring: KeyRing
    policy: Policy
    clock: Callable[[], datetime]
    audit: AuditLog
    plans: PlanStore
    events: PlanEvents
    recorder: StoreRecorder
    approvals: Approvals
    memory: MemoryStore
    runtime: Runtime
    reads: ReadPool | None


def build_services(
    *,
    db: Database,
    registry: Registry,
    keyring: KeyRing,
    policy: Policy,
    connector_settings: Mapping[str, str],
    clock: Callable[[], datetime],
    credentials: Mapping[str, CredentialRef] | None = None,
    reads: ReadPool | None = None,
    contacts: Sequence[Contact] = (),
    tz: str = "UTC",
    proposer: IntentProposer | None = None,
    plan_writer: PlanWriter | None = None,
    signer_name: str = "planner@system",
    chat_context_budget: int = 5,
    audit: AuditLog | None = None,
    registry_store: RegistryStore | None = None,
    transport: StepTransport | None = None,
) -> Services:
    """The services over ``db`` (``plan_writer``: the entry points pass
    ``PlanWriter.for_settings``, the configured embedder checked at start; by default one over
    ``db`` with the offline embedder; ``contacts``: the people chat text may name — none unless
    given; ``registry_store``: where admins' registry edits go, None = read-only)."""
    base = _base(
        db,
        registry=registry,
        keyring=keyring,
        policy=policy,
        connector_settings=connector_settings,
        clock=clock,
        credentials=dict(credentials or {}),
        reads=reads,
        writer=plan_writer or PlanWriter.for_database(db, clock=clock),
        audit=audit or AuditLog(clock=clock),
        transport=transport,
    )
    planning = _planning(base, connector_settings, signer_name, chat_context_budget)
    chat = Chat(
        ConversationStore(db, clock=clock),
        planning,
        base.runtime,
        clock,
        contacts=tuple(contacts),
        tz=tz,
        proposer=proposer,
    )
    # the card names the people whose calendars were read by the caller's contacts
    planning.runs.people = lambda user_id: chat.people(user_id).known
    return _services(base, planning, chat, registry_store)


def _base(
    db: Database,
    *,
    registry: Registry,
    keyring: KeyRing,
    policy: Policy,
    connector_settings: Mapping[str, str],
    clock: Callable[[], datetime],
    credentials: dict[str, CredentialRef],
    reads: ReadPool | None,
    writer: PlanWriter,
    audit: AuditLog,
    transport: StepTransport | None,
) -> _Base:
    # ContextRAG's exemplar source: the PlanLibrary that PlanWriter keeps (PlanLibrary SPEC §4)
    memory = MemoryStore(db, clock=clock, exemplars=writer.library, reads=reads)
    executor = Executor(
        keys=keyring,
        registry=registry,
        transport=transport,
        db=db,
        settings=connector_settings,
        credentials=credentials,
        clock=clock,
        plan_writer=writer,
        policy=policy,
        # the gate rules' set tests read every contact of the person as they are at the write
        facts=contacts_source(functools.partial(memory.contacts, limit=None)),
    )
    intake = Intake(registry, threshold=policy.intake_threshold)
    return _Base(
        db=db,
        keyring=keyring,
        policy=policy,
        clock=clock,
        audit=audit,
        plans=PlanStore(db, clock=clock),
        events=PlanEvents(db, reads),
        recorder=StoreRecorder(db, clock=clock),
        # every gate decision is a receipt signed by the service key (Approvals SPEC §4)
        approvals=Approvals(db, clock=clock, audit=audit, receipts=ReceiptKeySigner(keyring)),
        memory=memory,
        runtime=Runtime(registry, executor, intake, transport=transport, credentials=credentials),
        reads=reads,
    )


def _planning(
    b: _Base, connector_settings: Mapping[str, str], signer_name: str, chat_context_budget: int
) -> Planning:
    views = PlanViews(
        b.db, b.plans, b.events, b.approvals, b.audit, b.keyring, b.runtime, b.clock, b.reads
    )
    durable = DurableLink(b.runtime, b.events)
    runs = Runs(
        b.db, views, b.runtime, b.recorder, b.audit, durable, b.keyring, connector_settings, b.clock
    )
    return Planning(
        b.db,
        views,
        runs,
        b.runtime,
        b.memory,
        b.recorder,
        b.audit,
        b.keyring,
        b.policy,
        b.clock,
        signer_name=signer_name,
        chat_context_budget=chat_context_budget,
    )


def _services(
    b: _Base, planning: Planning, chat: Chat, registry_store: RegistryStore | None
) -> Services:
    views, runs = planning.views, planning.runs
    gates = Gates(
        b.db, views, b.runtime, b.approvals, b.audit, runs.durable, b.keyring, b.policy, b.clock
    )
    return Services(
        db=b.db,
        runtime=b.runtime,
        views=views,
        planning=planning,
        chat=chat,
        gates=gates,
        runs=runs,
        memory=Memory(b.db, b.memory, RuntimeRecords(b.runtime), b.audit),
        registry=RegistryDesk(b.runtime, registry_store),
        codec=CodecDesk(b.db, views, b.audit),
        clock=b.clock,
        reads=b.reads,
    )
