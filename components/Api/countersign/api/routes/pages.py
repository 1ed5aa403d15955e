"""The HTML pages (Api SPEC, the chat page): the chat, preferences and consent, one plan's card."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from ..bodies import StrictJsonRoute
from ..deps import Config, Svc, signed_in
from ..pages import CHAT, MEMORY, page

__all__ = ["router"]

router = APIRouter(route_class=StrictJsonRoute)


@router.get("/", include_in_schema=False)
def home(request: Request, cfg: Config) -> Response:
    """The chat page for a signed-in person; otherwise how to sign in."""
    who = signed_in(request)
    if who is None:
        return page(
            "<p>Not signed in: open the login link <code>countersign up</code> printed "
            "(or run <code>countersign login-link</code>).</p>"
            "<p>The API: <a href='/docs'>/docs</a>.</p>"
        )
    return page(CHAT, who=who, temporal_ui=cfg.temporal_ui)


@router.get("/memory", include_in_schema=False)
def memory_page(request: Request) -> Response:
    """The preferences and consent page."""
    who = signed_in(request)
    if who is None:
        return page("<p>Not signed in.</p>", status=401)
    return page(MEMORY, who=who, memory=True)


@router.get("/plans/{plan_id}", include_in_schema=False)
def card_page(plan_id: str, request: Request, svc: Svc, cfg: Config) -> Response:
    """One plan's card at its own URL (the owner's only: another's is not found)."""
    who = signed_in(request)
    if who is None:
        return page("<p>Not signed in.</p>", status=401)
    svc.views.document(plan_id, who)  # 404 problem for another user's plan
    return page(CHAT, who=who, plan_id=plan_id, temporal_ui=cfg.temporal_ui)
