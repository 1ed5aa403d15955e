"""Settling an execute that was cut short: what is known of its writes, finish, undo."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from ..bodies import StrictJsonRoute
from ..deps import Caller, Svc
from ..services.settle import SettleDesk
from ..wiring import Services

__all__ = ["router"]

router = APIRouter(route_class=StrictJsonRoute)


def _desk(svc: Services) -> SettleDesk:
    return SettleDesk(svc.runtime, svc.views, svc.events)


@router.get("/v1/plans/{plan_id}/settlement", tags=["plans"])
def settlement(plan_id: str, who: Caller, svc: Svc) -> dict[str, Any]:
    """What is known of the plan's interactive writes (per step: done, unknown, failed,
    pending, compensated), its status (``needs_attention`` once the reconciler could not
    settle them) and what the caller may do (``offers``: finish, undo)."""
    return _desk(svc).state(plan_id, who.user_id)


@router.post("/v1/plans/{plan_id}/finish", tags=["plans"])
async def finish(plan_id: str, who: Caller, svc: Svc) -> dict[str, Any]:
    """Finish a cut-short execute: its unknown writes are settled from evidence first, then the
    missing writes are sent under the approval that run spent; refused (409) while a write's
    outcome is still unknown."""
    return await _desk(svc).finish(plan_id, who.user_id)


@router.post("/v1/plans/{plan_id}/undo", tags=["plans"])
async def undo(plan_id: str, who: Caller, svc: Svc) -> dict[str, Any]:
    """Undo a cut-short execute: every write it did is compensated, newest first; the execute
    ends failed, naming any write whose outcome stays unknown."""
    return await _desk(svc).undo(plan_id, who.user_id)
