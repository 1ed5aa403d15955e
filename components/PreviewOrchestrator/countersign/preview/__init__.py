"""PreviewOrchestrator: verified, read-only previews on n8n, with fingerprints of what was read."""

from .adapters import N8nTransport, StoreRecorder
from .core import (
    READ_ROLES,
    PreviewRecorder,
    PreviewRefusedError,
    PreviewResult,
    fingerprint,
    plan_preview,
    preview_steps,
    run_preview,
    verify_or_audit,
)
from .runner import N8nStepRunner, PreparedStep, StepFailedError, StepTransport, run_dag

__all__ = [
    "READ_ROLES",
    "N8nStepRunner",
    "N8nTransport",
    "PreparedStep",
    "PreviewRecorder",
    "PreviewRefusedError",
    "PreviewResult",
    "StepFailedError",
    "StepTransport",
    "StoreRecorder",
    "fingerprint",
    "plan_preview",
    "preview_steps",
    "run_dag",
    "run_preview",
    "verify_or_audit",
]
