"""Acting on a plan: preview, approve and reject a gate, execute, cancel."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter

from ..bodies import StrictJsonRoute
from ..deps import Caller, Svc, Telemetry
from ..models import ApproveRequest, ExecuteRequest, RejectRequest

__all__ = ["router"]

router = APIRouter(route_class=StrictJsonRoute)


@router.post("/v1/plans/{plan_id}/preview", tags=["plans"])
async def preview(plan_id: str, who: Caller, svc: Svc, metrics: Telemetry) -> dict[str, Any]:
    """Run the read-only preview again."""
    start = time.perf_counter()
    try:
        return await svc.runs.preview(plan_id, who.user_id)
    finally:
        metrics.engine("preview", time.perf_counter() - start)


@router.post("/v1/plans/{plan_id}/gates/{gate_id}/approve", tags=["gates"])
async def approve(
    plan_id: str, gate_id: str, who: Caller, svc: Svc, body: ApproveRequest | None = None
) -> dict[str, Any]:
    """Approve a gate: a short-lived, single-use token bound to this plan, gate and caller;
    a plan running on Temporal gets it at once (its ``approve_gate`` update)."""
    choice = body.choice if body else None
    return await svc.gates.approve(plan_id, gate_id, who.user_id, choice=choice)


@router.post("/v1/plans/{plan_id}/gates/{gate_id}/reject", tags=["gates"])
async def reject(
    plan_id: str, gate_id: str, who: Caller, svc: Svc, body: RejectRequest | None = None
) -> dict[str, Any]:
    """Reject a gate: nothing it guards will run."""
    reason = body.reason if body else None
    return await svc.gates.reject(plan_id, gate_id, who.user_id, reason=reason)


@router.post("/v1/plans/{plan_id}/execute", status_code=202, tags=["plans"])
async def execute(
    plan_id: str, body: ExecuteRequest, who: Caller, svc: Svc, metrics: Telemetry
) -> dict[str, Any]:
    """Execute with gate tokens; progress is on the event stream."""
    start = time.perf_counter()
    try:
        report = await svc.runs.execute(plan_id, who.user_id, body.tokens)
    finally:
        metrics.engine("execute", time.perf_counter() - start)
    return {
        "plan_id": report.plan_id,
        "status": report.status,
        "results": [w.to_json() for w in report.wrappers],
        "compensated": report.compensated,
        "workflow_id": report.workflow_id,
        "waiting_gate": report.waiting_gate,
        "gate_preview": report.gate_preview,
        # a failed step: its class, what follows (retry / replan / compensate / ask) and why
        "failure": report.failure,
        "events": f"/v1/plans/{plan_id}/events",
    }


@router.post("/v1/plans/{plan_id}/cancel", tags=["plans"])
async def cancel(plan_id: str, who: Caller, svc: Svc) -> dict[str, Any]:
    """Cancel the plan: nothing more of it runs (a running watcher is told to stop)."""
    return await svc.runs.cancel(plan_id, who.user_id)
