"""The caller's plans: the list, one plan, its receipts, a revision, a re-plan, the revision tree."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response

from ..bodies import StrictJsonRoute
from ..deps import Caller, Svc, Telemetry
from ..models import ReplanRequest, ReviseRequest
from ..responses import json_response
from ..services.revisions import revision_tree
from ..shown_reads import shown_plan

__all__ = ["router"]

router = APIRouter(route_class=StrictJsonRoute)


@router.get("/v1/plans", tags=["plans"])
def list_plans(
    who: Caller,
    svc: Svc,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
) -> dict[str, Any]:
    """The caller's plans, newest first (cursor-paginated)."""
    return svc.views.list(who.user_id, limit=limit, cursor=cursor)


@router.get("/v1/plans/{plan_id}", tags=["plans"], response_model=dict[str, Any])
async def get_plan(plan_id: str, who: Caller, svc: Svc) -> Response:
    """The signed plan, its status, per-step status and results, and its gates; ``shown``: what
    the card shows of its reads (those stored) and its writes."""
    # one statement on the read pool: cheaper in the loop than a hop to a worker thread
    body = svc.views.show(plan_id, who.user_id)
    outputs = {s["step"]: s["output"] for s in body["steps"] if s.get("output") is not None}
    # pure and without the contacts (no second statement): the card names people from its
    # preview's ``shown``, this one is its fallback when no preview could run
    registry = svc.runs.runtime.registry
    body["shown"] = shown_plan(body["plan"], outputs, registry, me=who.user_id)
    return json_response(body)


@router.get("/v1/plans/{plan_id}/receipts", tags=["plans"], response_model=dict[str, Any])
def get_receipts(plan_id: str, who: Caller, svc: Svc) -> Response:
    """The plan's approval receipts as a bundle that verifies offline (``countersign
    receipts verify``): the signed plan, every gate decision signed, a signed head, keys."""
    name = f"receipts-{plan_id}.json"
    disposition = {"Content-Disposition": f'attachment; filename="{name}"'}
    return json_response(svc.views.receipts(plan_id, who.user_id), headers=disposition)


@router.get("/v1/plans/{plan_id}/revisions", tags=["plans"], response_model=dict[str, Any])
def get_revisions(plan_id: str, who: Caller, svc: Svc) -> Response:
    """The tree of revisions this plan belongs to: from its root down, each plan with its
    status, why it was made (``reason``: edited, evidence_dropped; ``changed``, ``dropped``) and
    its own ``revisions``; the plan asked about is ``current``. Open any of them at
    ``/plans/{id}`` and revise it to fork from there; an approval never carries over."""
    return json_response(revision_tree(svc.views, plan_id, who.user_id))


@router.post("/v1/plans/{plan_id}/revise", status_code=201, tags=["plans"])
async def revise(
    plan_id: str, body: ReviseRequest, who: Caller, svc: Svc, metrics: Telemetry
) -> Response:
    """A revision: the plan's intent with these entities changed, planned, signed and
    previewed as a new plan that names the one it revises, with what it now understands
    (``understood``, the changed entities marked). Executing the revision (for a watcher:
    starting it) cancels the plan it revises."""
    out = await svc.chat.revise(plan_id, body.entities, who.user_id, observe=metrics.engine)
    return json_response(out.body, status=201 if out.planned else 200)


@router.post("/v1/plans/{plan_id}/replan", status_code=201, tags=["plans"])
async def replan(
    plan_id: str, body: ReplanRequest, who: Caller, svc: Svc, metrics: Telemetry
) -> Response:
    """Plan the same request again without the evidence items named in ``drop`` (the card's
    "drop and re-plan"): a revision — a new signed plan naming the one it revises."""
    out = await svc.planning.replan(plan_id, body.drop, who.user_id, observe=metrics.engine)
    return json_response(out.body, status=201 if out.planned else 200)
