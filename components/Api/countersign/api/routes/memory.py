"""The caller's memory (ContextRAG SPEC §3): preferences and consent, facts, forget, export."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from countersign.contextrag import ForgetRequest, MemoryWrite, PrefsUpdate

from ..bodies import StrictJsonRoute
from ..deps import Caller, Svc
from ..responses import json_response

__all__ = ["router"]

router = APIRouter(route_class=StrictJsonRoute)


@router.get("/v1/memory/prefs", tags=["memory"])
def get_prefs(who: Caller, svc: Svc) -> dict[str, Any]:
    """The caller's preferences and consent per purpose."""
    return svc.memory.prefs(who.user_id)


@router.put("/v1/memory/prefs", tags=["memory"])
def put_prefs(body: PrefsUpdate, who: Caller, svc: Svc) -> dict[str, Any]:
    """Set preferences (``null`` removes one) and grant (``true``) or revoke (``false``)
    consent per purpose; consent changes are audited (purposes only)."""
    return svc.memory.put_prefs(who.user_id, body.to_json())


@router.post("/v1/memory/facts", status_code=201, tags=["memory"])
def post_facts(body: MemoryWrite, who: Caller, svc: Svc) -> dict[str, Any]:
    """Store facts (T2–T5; T5 derived scalars under a consent purpose) and contacts."""
    return svc.memory.add(who.user_id, body.to_json())


@router.post("/v1/memory/forget", tags=["memory"])
async def forget(body: ForgetRequest, who: Caller, svc: Svc) -> dict[str, Any]:
    """Forget everything about the caller (``{"all": true}``: the account too) or one
    subject: the Temporal runs and n8n executions of their plans first, then every table
    and the audit log (redacted); audited without the forgotten content. A runtime that
    is down: 503 ``forget_incomplete`` with nothing deleted — the same request again
    finishes."""
    return await svc.memory.forget(who.user_id, body.to_json())


@router.get("/v1/memory/export", tags=["memory"])
async def export(who: Caller, svc: Svc) -> Response:
    """One JSON document with everything stored about the caller: their rows in every table
    and a summary of their n8n executions and Temporal runs."""
    return json_response(await svc.memory.export(who.user_id))
