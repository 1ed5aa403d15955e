"""Verify before anything runs, and leave a trace of every refusal (used by preview, execute and
the durable activities alike)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Protocol

from countersign.kernel import CountersignError, SignatureError, SignedPlan, content_hash
from countersign.registry import Registry
from countersign.signer import KeyLookup, VerifiedPlan, verify_signed_plan

from .validity import PlanNotCurrentError, check_current

__all__ = ["StepRecorder", "fingerprint", "verify_or_audit"]


class StepRecorder(Protocol):
    """Where runs leave their trace (storage + audit): refusals, previews."""

    def signature_refused(
        self, document: SignedPlan | Mapping[str, Any], error: CountersignError, *, actor: str
    ) -> None:
        """Audit a refused signature or a signed plan that may not run any more (derived facts
        only)."""

    def preview_done(
        self,
        verified: VerifiedPlan,
        fingerprints: Mapping[int, str],
        *,
        actor: str,
        latency_ms: int,
        status: str,
        reason: str | None,
        outputs: Mapping[int, Any] | None = None,
    ) -> None:
        """Store the outputs and fingerprints and audit the preview."""


def verify_or_audit(
    document: SignedPlan | Mapping[str, Any],
    *,
    keys: KeyLookup,
    recorder: StepRecorder,
    actor: str,
    registry: Registry | None = None,
    now: datetime,
) -> VerifiedPlan:
    """Verify a signed plan (a ``SignedPlan``, or the document as read: verified as given), then
    that it may still run (``registry`` is the one it was signed against, ``now`` within its TTL:
    ``countersign.steps.check_current``); on failure audit the refusal and re-raise."""
    try:
        verified = verify_signed_plan(document, keys=keys)
        if registry is not None:
            check_current(
                verified.plan,
                registry_version=registry.version,
                now=now,
            )
    except (SignatureError, PlanNotCurrentError) as e:
        recorder.signature_refused(document, e, actor=actor)
        raise
    return verified


def fingerprint(output: Any) -> str:
    """What a read returned, as a hash (compared again before a write)."""
    return content_hash(output)
