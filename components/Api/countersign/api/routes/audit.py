"""The audit rows of the caller's plans (admins: any plan, or the whole log)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from ..bodies import StrictJsonRoute
from ..deps import Caller, Svc
from ..responses import jsonable

__all__ = ["router"]

router = APIRouter(route_class=StrictJsonRoute)


@router.get("/v1/audit", tags=["audit"])
def audit(
    who: Caller,
    svc: Svc,
    plan_id: Annotated[str | None, Query(max_length=26)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> dict[str, Any]:
    """Audit rows of one of the caller's plans (admins: any plan, or all rows)."""
    rows = svc.views.audit_rows(who.user_id, admin=who.admin, plan_id=plan_id, limit=limit)
    return {"items": [jsonable(r) for r in rows]}
