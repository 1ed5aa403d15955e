"""WorkflowBuilder: signed plan + registry -> n8n workflow JSON (step and batch workflows)."""

from .core import (
    HTTP_REQUEST,
    READ_METHODS,
    CredentialRef,
    StepWorkflow,
    build_batch_workflow,
    build_step_workflow,
    build_workflow_for_step,
    read_only_violations,
)
from .queries import SafeQuery, declared_query

__all__ = [
    "HTTP_REQUEST",
    "READ_METHODS",
    "CredentialRef",
    "SafeQuery",
    "StepWorkflow",
    "build_batch_workflow",
    "build_step_workflow",
    "build_workflow_for_step",
    "declared_query",
    "read_only_violations",
]
