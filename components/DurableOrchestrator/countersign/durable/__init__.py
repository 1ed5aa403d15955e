"""DurableOrchestrator: Temporal workflows for long-running plan steps (watchers, gates, sagas)."""

from .activities import DurableActivities
from .codec import (
    EncryptionCodec,
    PayloadCodecError,
    PayloadKeys,
    PayloadKeyUnknownError,
    PayloadTamperedError,
    payload_codec,
    rotate_payload_key,
)
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
from .reconcile import DurableReconciler, ReconcileError, ended_outcome
from .watcher import WatcherWorkflow
from .worker import (
    TASK_QUEUE,
    connect,
    data_converter,
    durable_starter,
    make_worker,
    register_search_attributes,
    replayer,
    start_plan,
    start_watcher,
    watch_input_for,
    workflow_runner,
)

__all__ = [
    "TASK_QUEUE",
    "ApproveGate",
    "DurableActivities",
    "DurableReconciler",
    "EncryptionCodec",
    "PayloadCodecError",
    "PayloadKeyUnknownError",
    "PayloadKeys",
    "PayloadTamperedError",
    "PlanExecutionWorkflow",
    "PlanInput",
    "PlanRunResult",
    "ReconcileError",
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
    "data_converter",
    "durable_starter",
    "ended_outcome",
    "make_worker",
    "payload_codec",
    "register_search_attributes",
    "replayer",
    "rotate_payload_key",
    "start_plan",
    "start_watcher",
    "watch_input_for",
    "workflow_runner",
]
