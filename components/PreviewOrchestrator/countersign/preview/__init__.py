"""PreviewOrchestrator: verified, read-only previews on n8n, with fingerprints of what was read.

A thin policy over ``countersign.steps`` (what may run in a preview: read-only, previewable
reads); the scheduler, step runner, transport and recorder live there."""

from .core import READ_ROLES, PreviewResult, plan_preview, preview_steps, run_preview

__all__ = ["READ_ROLES", "PreviewResult", "plan_preview", "preview_steps", "run_preview"]
