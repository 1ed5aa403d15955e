"""Signing in: the one-time login link's session (browser) and who the credentials are."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response

from ..bodies import StrictJsonRoute
from ..deps import CSRF_COOKIE, SESSION_COOKIE, Caller, Users

__all__ = ["router"]

router = APIRouter(route_class=StrictJsonRoute)


@router.get("/login", tags=["service"], include_in_schema=False)
def login(token: Annotated[str, Query(min_length=10, max_length=200)], users: Users) -> Response:
    """Spend a one-time login link (``countersign up`` prints it): sets an HttpOnly,
    SameSite=Strict session cookie and a readable CSRF cookie, then goes to the chat page."""
    session, csrf = users.redeem_link(token)
    response = Response(status_code=303, headers={"Location": "/"})
    response.set_cookie(
        SESSION_COOKIE, session, httponly=True, samesite="strict", max_age=12 * 3600, path="/"
    )
    # the page reads this one and echoes it in X-CSRF-Token on every write
    response.set_cookie(CSRF_COOKIE, csrf, httponly=False, samesite="strict", path="/")
    return response


@router.get("/v1/me", tags=["service"])
def me(who: Caller) -> dict[str, Any]:
    """Who the credentials belong to."""
    return {"user_id": who.user_id, "admin": who.admin, "via": who.via}
