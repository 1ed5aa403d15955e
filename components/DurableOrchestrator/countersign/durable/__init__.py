"""DurableOrchestrator: Temporal workflows for long-running plan steps (watchers, gates, sagas)."""

# Lazy (PEP 562): a name's module is imported on first use, so importing one light part of this
# package (an error class, a constant) does not load the rest (issue 28 §5: a CLI verb imports
# only what it uses). The names, and what they are, are those of the eager imports below.
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
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
    from .gates import approval_for
    from .models import (
        ApproveGate,
        ConfirmCall,
        PlanInput,
        PlanRunResult,
        Reconfigure,
        RedeemCall,
        RejectCall,
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
    "ConfirmCall",
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
    "RejectCall",
    "RejectGate",
    "ResolveStep",
    "StepCall",
    "WatchInput",
    "WatchResult",
    "WatchState",
    "WatcherWorkflow",
    "approval_for",
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

#: each exported name -> the module (relative to this package) that defines it
_LAZY: dict[str, str] = {
    "DurableActivities": "activities",
    "EncryptionCodec": "codec",
    "PayloadCodecError": "codec",
    "PayloadKeys": "codec",
    "PayloadKeyUnknownError": "codec",
    "PayloadTamperedError": "codec",
    "payload_codec": "codec",
    "rotate_payload_key": "codec",
    "approval_for": "gates",
    "ApproveGate": "models",
    "ConfirmCall": "models",
    "PlanInput": "models",
    "PlanRunResult": "models",
    "Reconfigure": "models",
    "RedeemCall": "models",
    "RejectCall": "models",
    "RejectGate": "models",
    "ResolveStep": "models",
    "StepCall": "models",
    "WatchInput": "models",
    "WatchResult": "models",
    "WatchState": "models",
    "PlanExecutionWorkflow": "plan_workflow",
    "DurableReconciler": "reconcile",
    "ReconcileError": "reconcile",
    "ended_outcome": "reconcile",
    "WatcherWorkflow": "watcher",
    "TASK_QUEUE": "worker",
    "connect": "worker",
    "data_converter": "worker",
    "durable_starter": "worker",
    "make_worker": "worker",
    "register_search_attributes": "worker",
    "replayer": "worker",
    "start_plan": "worker",
    "start_watcher": "worker",
    "watch_input_for": "worker",
    "workflow_runner": "worker",
}

if not TYPE_CHECKING:
    from countersign.kernel import lazy_exports

    __getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
