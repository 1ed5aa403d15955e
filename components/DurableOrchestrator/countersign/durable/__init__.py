"""DurableOrchestrator: Temporal workflows for long-running plan steps (watchers, gates, sagas)."""

from .activities import DurableActivities
from .http import HttpCall, http_call
from .models import (
    ApproveGate,
    PlanInput,
    PlanRunResult,
    Reconfigure,
    RedeemCall,
    RejectGate,
    ResolveStep,
    StepCall,
    WatchInput,
    WatchResult,
    WatchState,
)
from .plan_workflow import PlanExecutionWorkflow
from .worker import (
    TASK_QUEUE,
    connect,
    durable_starter,
    make_worker,
    register_search_attributes,
    replayer,
    start_plan,
    start_watcher,
    watch_input_for,
    workflow_runner,
)
from .workflows import WatcherWorkflow

__all__ = [
    "TASK_QUEUE",
    "ApproveGate",
    "DurableActivities",
    "HttpCall",
    "PlanExecutionWorkflow",
    "PlanInput",
    "PlanRunResult",
    "Reconfigure",
    "RedeemCall",
    "RejectGate",
    "ResolveStep",
    "StepCall",
    "WatchInput",
    "WatchResult",
    "WatchState",
    "WatcherWorkflow",
    "connect",
    "durable_starter",
    "http_call",
    "make_worker",
    "register_search_attributes",
    "replayer",
    "start_plan",
    "start_watcher",
    "watch_input_for",
    "workflow_runner",
]
