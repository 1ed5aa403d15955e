"""WorkflowBuilder: signed plan + registry -> n8n workflow JSON (step workflows, plan workflow)."""

from .core import (
    HTTP_REQUEST,
    READ_METHODS,
    CredentialRef,
    StepWorkflow,
    build_batch_workflow,
    build_plan_workflow,
    build_step_workflow,
    build_workflow_for_step,
    read_only_violations,
    webhook_path,
)

__all__ = [
    "HTTP_REQUEST",
    "READ_METHODS",
    "CredentialRef",
    "StepWorkflow",
    "build_batch_workflow",
    "build_plan_workflow",
    "build_step_workflow",
    "build_workflow_for_step",
    "read_only_violations",
    "webhook_path",
]
