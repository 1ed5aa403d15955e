"""Signing in: the one-time login link's session (browser) and who the credentials are.

A one-time link never acts on GET (issue 26 §5): mail scanners and link previews fetch every link
in a mail, and a link spent by its GET is burned (or signs the scanner in). ``GET /login?token=``
only shows a page whose button POSTs the token; the POST spends it and sets the session."""

from __future__ import annotations

import html
from typing import Annotated, Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Query, Request, Response

from ..bodies import StrictJsonRoute
from ..deps import CSRF_COOKIE, SESSION_COOKIE, Caller, Users
from ..errors import AuthError
from ..pages import page

__all__ = ["router"]

router = APIRouter(route_class=StrictJsonRoute)

#: a login form's body is one token (≤ 200 characters) and its name: anything longer is refused
_MAX_FORM = 1024
_NO_STORE = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}


@router.get("/login", tags=["service"], include_in_schema=False)
def login_page(token: Annotated[str, Query(min_length=10, max_length=200)]) -> Response:
    """The sign-in page of a one-time link: a button that POSTs the token. Opening it (a person,
    a mail scanner, a link preview) spends nothing and decides nothing."""
    body = (
        "<section aria-label='sign in'><h2>Sign in to Countersign</h2>"
        "<p>This link signs you in once. Press the button to continue.</p>"
        "<form method='post' action='/login'>"
        f"<input type='hidden' name='token' value='{html.escape(token, quote=True)}'>"
        "<button type='submit'>Sign in</button></form></section>"
    )
    response = page(body)
    response.headers.update(_NO_STORE)
    return response


@router.post("/login", tags=["service"], include_in_schema=False)
async def login(request: Request, users: Users) -> Response:
    """Spend a one-time login link (the sign-in page's form: ``token=…``): sets an HttpOnly,
    SameSite=Strict session cookie and a readable CSRF cookie, then goes to the chat page. A
    form posted from another site is refused (``Sec-Fetch-Site: cross-site``)."""
    if request.headers.get("sec-fetch-site") == "cross-site":
        raise AuthError("sign in from the link's own page")
    raw = await request.body()
    if len(raw) > _MAX_FORM:
        raise AuthError(f"the sign-in form is longer than {_MAX_FORM} bytes")
    try:
        form = parse_qs(raw.decode("ascii"), strict_parsing=False, max_num_fields=4)
    except (UnicodeDecodeError, ValueError) as e:
        raise AuthError("the sign-in form is not a form (token=…)") from e
    token = (form.get("token") or [""])[0]
    if not 10 <= len(token) <= 200:
        raise AuthError("the sign-in form needs the link's token (10 to 200 characters)")
    session, csrf = users.redeem_link(token)
    response = Response(status_code=303, headers={"Location": "/", **_NO_STORE})
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
