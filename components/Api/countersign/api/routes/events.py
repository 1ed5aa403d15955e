"""A plan's events as Server-Sent Events (Api SPEC, events over SSE): replayed from the log,
then live (LISTEN/NOTIFY wakes the stream); resumable with ``Last-Event-ID``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from sse_starlette.sse import EventSourceResponse

from countersign.kernel import ascii_digits
from countersign.storage import PlanEvents

from ..bodies import StrictJsonRoute
from ..deps import Caller, Config, Hub, Svc
from ..errors import BadCursorError
from ..events import EventHub
from ..responses import event_json

__all__ = ["router"]

router = APIRouter(route_class=StrictJsonRoute)

#: events read at once (a shorter page ends a replay without ``follow``)
_PAGE = 500


@router.get(
    "/v1/plans/{plan_id}/events",
    tags=["plans"],
    response_class=EventSourceResponse,
    responses={200: {"content": {"text/event-stream": {}}}},
)
async def events(
    plan_id: str,
    who: Caller,
    request: Request,
    svc: Svc,
    cfg: Config,
    hub: Hub,
    follow: bool = True,
) -> EventSourceResponse:
    """The plan's events as Server-Sent Events: replayed from the log, then live; resumable
    with ``Last-Event-ID`` (ids are the per-plan sequence)."""
    svc.views.document(plan_id, who.user_id)  # 404 for another user's plan
    raw = request.headers.get("last-event-id", "0").strip() or "0"
    if not ascii_digits(raw) or len(raw) > 9:
        raise BadCursorError(f"Last-Event-ID {raw[:20]!r} is not an event id of this plan")
    live = hub if follow else None
    rows = _stream(svc.events, plan_id, int(raw), request, live, follow, cfg.sse_ping_s)
    return EventSourceResponse(rows, ping=cfg.sse_ping_s)


async def _stream(
    log: PlanEvents,
    plan_id: str,
    after: int,
    request: Request,
    hub: EventHub | None,
    follow: bool,
    ping_s: int,
) -> AsyncIterator[dict[str, Any]]:
    """Every event after ``after``; following, then each new one as it commits (with a hub:
    woken by its notification — the waiter is registered before the read, so none is
    missed)."""
    while True:
        if hub is not None:
            async with hub.waiter(plan_id) as woke:
                rows = await asyncio.to_thread(log.since, plan_id, after)
                if not rows:
                    if await request.is_disconnected():
                        return
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(woke.wait(), timeout=ping_s)
                    continue
        else:
            rows = await asyncio.to_thread(log.since, plan_id, after)
        for r in rows:
            after = int(r["seq"])
            yield {"id": str(after), "event": r["kind"], "data": event_json(r)}
        if not follow and len(rows) < _PAGE:
            return
